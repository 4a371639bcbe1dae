#include "model/cuda/cuda_model_runner.hpp"

#include <algorithm>
#include <stdexcept>

#include "kernels/cuda/activation.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/pool.hpp"
#include "model/layers/conv2d.hpp"
#include "model/layers/elementwise.hpp"
#include "model/layers/linear.hpp"
#include "model/layers/pool2d.hpp"

namespace hearsay {

CudaModelRunner::CudaModelRunner(const Model& model, std::int64_t max_batch, cudaStream_t stream)
    : model_(model), max_batch_(max_batch), stream_(stream), plans_(dnn_) {
  if (max_batch < 1) throw std::invalid_argument("CudaModelRunner: max_batch must be >= 1");
  blas_.set_stream(stream);
  dnn_.set_stream(stream);
  const auto& layers = model.layers();
  std::int64_t widest = model.input_floats() * max_batch;
  outputs_.resize(layers.size());
  output_ptr_.resize(layers.size());
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const Shape out = model.shape_after(static_cast<int>(i), max_batch);
    widest = std::max(widest, out.numel());
    if (model.is_fused_away(i)) {
      output_ptr_[i] = output_ptr_[i - 1];
    } else {
      outputs_[i] = cuda::DeviceBuffer<float>(static_cast<std::size_t>(out.numel()));
      output_ptr_[i] = outputs_[i].data();
    }
  }
  grad_a_ = cuda::DeviceBuffer<float>(static_cast<std::size_t>(widest));
  grad_b_ = cuda::DeviceBuffer<float>(static_cast<std::size_t>(widest));
}

const float* CudaModelRunner::forward(const float* params, const float* x, std::int64_t batch) {
  if (batch < 1 || batch > max_batch_)
    throw std::invalid_argument("CudaModelRunner::forward: batch " + std::to_string(batch) + " outside [1, " +
                                std::to_string(max_batch_) + "]");
  batch_ = batch;
  input_ = x;
  const float* in = x;
  for (std::size_t i = 0; i < model_.layers().size(); ++i) {
    if (!model_.is_fused_away(i)) forward_layer(i, params, in, output_ptr_[i], batch);
    in = output_ptr_[i];
  }
  return in;
}

void CudaModelRunner::backward(const float* params, float* grads) {
  float* dy = grad_a_.data();
  float* spare[2] = {grad_a_.data(), grad_b_.data()};
  for (int i = static_cast<int>(model_.layers().size()) - 1; i >= 0; --i) {
    const auto idx = static_cast<std::size_t>(i);
    if (model_.is_fused_away(idx)) continue;  // the producer applies the ReLU's mask
    const float* x = i == 0 ? input_ : output_ptr_[idx - 1];
    float* dx = i == 0 ? nullptr : (dy == spare[0] ? spare[1] : spare[0]);
    backward_layer(idx, params, x, output_ptr_[idx], dy, dx, grads, batch_);
    dy = dx;
  }
}

void CudaModelRunner::forward_layer(std::size_t i, const float* params, const float* x, float* y,
                                    std::int64_t batch) {
  const Layer& layer = *model_.layers()[i];
  const Shape in = model_.shape_after(static_cast<int>(i) - 1, batch);
  const Shape out = model_.shape_after(static_cast<int>(i), batch);
  const float* w = params + layer.param_offset();
  const int n = static_cast<int>(batch);
  if (const auto* lin = dynamic_cast<const Linear*>(&layer)) {
    const int fin = lin->in_features(), fout = lin->out_features();
    cuda::linear_forward(blas_, n, fin, fout, x, w, y);
    cuda::bias_act_cols(batch, fout, w + static_cast<std::int64_t>(fin) * fout, layer.fused_relu(), y,
                        stream_);
  } else if (const auto* conv = dynamic_cast<const Conv2d*>(&layer)) {
    const cpu::ConvGeometry g = conv->geometry(in);
    plans_.plan(g, n, conv->out_channels()).forward(x, w, y);
    const std::int64_t bias_at = layer.param_count() - conv->out_channels();
    cuda::bias_act_rows(batch, conv->out_channels(), out.per_item() / conv->out_channels(), w + bias_at,
                        layer.fused_relu(), y, stream_);
  } else if (dynamic_cast<const ReLU*>(&layer)) {
    cuda::relu_forward(out.numel(), x, y, stream_);
  } else if (dynamic_cast<const Flatten*>(&layer)) {
    HEARSAY_CUDA_CHECK(cudaMemcpyAsync(y, x, static_cast<std::size_t>(out.numel()) * sizeof(float),
                                       cudaMemcpyDeviceToDevice, stream_));
  } else if (const auto* avg = dynamic_cast<const AvgPool2d*>(&layer)) {
    cuda::avgpool_forward(avg->geometry(in), in[0] * in[1], x, y, stream_);
  } else if (const auto* mx = dynamic_cast<const MaxPool2d*>(&layer)) {
    cuda::maxpool_forward(mx->geometry(in), in[0] * in[1], x, y, stream_);
  } else {
    throw std::invalid_argument("the cuda backend cannot run layer " + std::to_string(i) + " (" +
                                layer.describe() + ")");
  }
}

void CudaModelRunner::backward_layer(std::size_t i, const float* params, const float* x, const float* y,
                                     float* dy, float* dx, float* grads, std::int64_t batch) {
  const Layer& layer = *model_.layers()[i];
  const Shape in = model_.shape_after(static_cast<int>(i) - 1, batch);
  const Shape out = model_.shape_after(static_cast<int>(i), batch);
  const float* w = params + layer.param_offset();
  float* gw = grads + layer.param_offset();
  const int n = static_cast<int>(batch);
  // A fused ReLU's backward, unless the next layer (an average pool) applied it already.
  if (layer.masks_own_relu()) cuda::relu_backward(out.numel(), y, dy, dy, stream_);
  if (const auto* lin = dynamic_cast<const Linear*>(&layer)) {
    const int fin = lin->in_features(), fout = lin->out_features();
    cuda::linear_backward_weight(blas_, n, fin, fout, dy, x, gw);
    cuda::bias_grad_cols(batch, fout, dy, gw + static_cast<std::int64_t>(fin) * fout, stream_);
    if (dx != nullptr) cuda::linear_backward_data(blas_, n, fin, fout, dy, w, dx);
  } else if (const auto* conv = dynamic_cast<const Conv2d*>(&layer)) {
    cuda::ConvPlan& plan = plans_.plan(conv->geometry(in), n, conv->out_channels());
    const std::int64_t bias_at = layer.param_count() - conv->out_channels();
    plan.backward_filter(x, dy, gw);
    cuda::bias_grad_rows(batch, conv->out_channels(), out.per_item() / conv->out_channels(), dy, gw + bias_at,
                         stream_);
    if (dx != nullptr) plan.backward_data(dy, w, dx);
  } else if (dynamic_cast<const ReLU*>(&layer)) {
    if (dx != nullptr) cuda::relu_backward(out.numel(), y, dy, dx, stream_);
  } else if (dynamic_cast<const Flatten*>(&layer)) {
    if (dx != nullptr)
      HEARSAY_CUDA_CHECK(cudaMemcpyAsync(dx, dy, static_cast<std::size_t>(out.numel()) * sizeof(float),
                                         cudaMemcpyDeviceToDevice, stream_));
  } else if (const auto* avg = dynamic_cast<const AvgPool2d*>(&layer)) {
    // With a ReLU before it whose mask it applies, x is that ReLU's output.
    if (dx != nullptr)
      cuda::avgpool_backward(avg->geometry(in), in[0] * in[1], dy, dx,
                             avg->mask_by_positive_input() ? x : nullptr, stream_);
  } else if (const auto* mx = dynamic_cast<const MaxPool2d*>(&layer)) {
    if (dx != nullptr) cuda::maxpool_backward(mx->geometry(in), in[0] * in[1], x, dy, dx, stream_);
  } else {
    throw std::invalid_argument("the cuda backend cannot run layer " + std::to_string(i) + " (" +
                                layer.describe() + ")");
  }
}

}  // namespace hearsay
