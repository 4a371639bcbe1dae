#include "model/cuda/cuda_model_runner.hpp"

#include <algorithm>
#include <stdexcept>

#include "kernels/cuda/activation.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/pool.hpp"
#include "kernels/cuda/resnet_ops.hpp"
#include "model/cuda/cuda_scratch_layout.hpp"
#include "model/layers/batchnorm2d.hpp"
#include "model/layers/conv2d.hpp"
#include "model/layers/elementwise.hpp"
#include "model/layers/linear.hpp"
#include "model/layers/pool2d.hpp"
#include "model/layers/residual.hpp"

namespace hearsay {

namespace {

[[noreturn]] void cannot_run(std::size_t i, const Layer& layer) {
  throw std::invalid_argument("the cuda backend cannot run layer " + std::to_string(i) + " (" +
                              layer.describe() + ")");
}

}  // namespace

CudaModelRunner::CudaModelRunner(const Model& model, std::int64_t max_batch, cudaStream_t stream)
    : model_(model), max_batch_(max_batch), stream_(stream), ops_(stream) {
  if (max_batch < 1) throw std::invalid_argument("CudaModelRunner: max_batch must be >= 1");
  const auto& layers = model.layers();
  std::int64_t widest = model.input_floats() * max_batch, scratch = 0;
  outputs_.resize(layers.size());
  output_ptr_.resize(layers.size());
  scratch_offset_.resize(layers.size());
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const Shape out = model.shape_after(static_cast<int>(i), max_batch);
    widest = std::max(widest, out.numel());
    // A smaller batch's layout fits in the largest one's: every region shrinks with it.
    scratch_offset_[i] = scratch;
    scratch += device_scratch_floats(*layers[i], model.shape_after(static_cast<int>(i) - 1, max_batch));
    if (model.is_fused_away(i)) {
      output_ptr_[i] = output_ptr_[i - 1];
    } else {
      outputs_[i] = cuda::DeviceBuffer<float>(static_cast<std::size_t>(out.numel()));
      output_ptr_[i] = outputs_[i].data();
    }
  }
  grad_a_ = cuda::DeviceBuffer<float>(static_cast<std::size_t>(widest));
  grad_b_ = cuda::DeviceBuffer<float>(static_cast<std::size_t>(widest));
  scratch_ = cuda::DeviceBuffer<float>(static_cast<std::size_t>(scratch));
}

const float* CudaModelRunner::forward(float* state, const float* x, std::int64_t batch, Pass pass) {
  if (batch < 1 || batch > max_batch_)
    throw std::invalid_argument("CudaModelRunner::forward: batch " + std::to_string(batch) + " outside [1, " +
                                std::to_string(max_batch_) + "]");
  batch_ = batch;
  pass_ = pass;
  input_ = x;
  const float* in = x;
  for (std::size_t i = 0; i < model_.layers().size(); ++i) {
    if (!model_.is_fused_away(i)) forward_layer(i, state, in, output_ptr_[i], batch);
    in = output_ptr_[i];
  }
  return in;
}

void CudaModelRunner::backward(const float* state, float* grads) {
  float* dy = grad_a_.data();
  float* spare[2] = {grad_a_.data(), grad_b_.data()};
  for (int i = static_cast<int>(model_.layers().size()) - 1; i >= 0; --i) {
    const auto idx = static_cast<std::size_t>(i);
    if (model_.is_fused_away(idx)) continue;  // the producer applies the ReLU's mask
    const float* x = i == 0 ? input_ : output_ptr_[idx - 1];
    // cuDNN's BatchNorm backward always writes dx: a first-layer BatchNorm gets a spare.
    const bool wants_dx = i > 0 || model_.layers()[idx]->op() == Op::batchnorm2d;
    float* dx = wants_dx ? (dy == spare[0] ? spare[1] : spare[0]) : nullptr;
    backward_layer(idx, state, x, output_ptr_[idx], dy, dx, grads, batch_);
    dy = dx;
  }
}

void CudaModelRunner::forward_layer(std::size_t i, float* state, const float* x, float* y,
                                    std::int64_t batch) {
  const Layer& layer = *model_.layers()[i];
  const Shape in = model_.shape_after(static_cast<int>(i) - 1, batch);
  const Shape out = model_.shape_after(static_cast<int>(i), batch);
  const float* w = state + layer.param_offset();
  switch (layer.op()) {
    case Op::linear: {
      const auto& lin = static_cast<const Linear&>(layer);
      const int fin = lin.in_features(), fout = lin.out_features();
      cuda::linear_forward(ops_.blas(), static_cast<int>(batch), fin, fout, x, w, y);
      cuda::bias_act_cols(batch, fout, w + static_cast<std::int64_t>(fin) * fout, layer.fused_relu(), y,
                          stream_);
      return;
    }
    case Op::conv2d:
      return ops_.conv_forward(static_cast<const Conv2d&>(layer), in, state, x, y);
    case Op::batchnorm2d:
      return ops_.batchnorm_forward(static_cast<const BatchNorm2d&>(layer), in, state, x, y, scratch_of(i),
                                    pass_);
    case Op::basic_block:
      return ops_.block_forward(static_cast<const BasicBlock&>(layer), in, state, x, y, scratch_of(i), pass_);
    case Op::relu:
      return cuda::relu_forward(out.numel(), x, y, stream_);
    case Op::flatten:
      HEARSAY_CUDA_CHECK(cudaMemcpyAsync(y, x, static_cast<std::size_t>(out.numel()) * sizeof(float),
                                         cudaMemcpyDeviceToDevice, stream_));
      return;
    case Op::avgpool2d:
      return cuda::avgpool_forward(static_cast<const AvgPool2d&>(layer).geometry(in), in[0] * in[1], x, y,
                                   stream_);
    case Op::maxpool2d:
      return cuda::maxpool_forward(static_cast<const MaxPool2d&>(layer).geometry(in), in[0] * in[1], x, y,
                                   stream_);
    case Op::global_avgpool2d:
      return cuda::global_avgpool_forward(in[0] * in[1], in[2] * in[3], x, y, stream_);
    default:
      cannot_run(i, layer);
  }
}

void CudaModelRunner::backward_layer(std::size_t i, const float* state, const float* x, const float* y,
                                     float* dy, float* dx, float* grads, std::int64_t batch) {
  const Layer& layer = *model_.layers()[i];
  const Shape in = model_.shape_after(static_cast<int>(i) - 1, batch);
  const Shape out = model_.shape_after(static_cast<int>(i), batch);
  const float* w = state + layer.param_offset();
  float* gw = grads + layer.param_offset();
  // A fused ReLU's backward, unless the next layer (an average pool) applied it already.
  if (layer.masks_own_relu()) cuda::relu_backward(out.numel(), y, dy, dy, stream_);
  switch (layer.op()) {
    case Op::linear: {
      const auto& lin = static_cast<const Linear&>(layer);
      const int n = static_cast<int>(batch), fin = lin.in_features(), fout = lin.out_features();
      cuda::linear_backward_weight(ops_.blas(), n, fin, fout, dy, x, gw);
      cuda::bias_grad_cols(batch, fout, dy, gw + static_cast<std::int64_t>(fin) * fout, stream_);
      if (dx != nullptr) cuda::linear_backward_data(ops_.blas(), n, fin, fout, dy, w, dx);
      return;
    }
    case Op::conv2d:
      return ops_.conv_backward(static_cast<const Conv2d&>(layer), in, state, x, dy, dx, grads);
    case Op::batchnorm2d:
      return ops_.batchnorm_backward(static_cast<const BatchNorm2d&>(layer), in, state, x, dy, dx, grads,
                                     scratch_of(i), pass_);
    case Op::basic_block:
      return ops_.block_backward(static_cast<const BasicBlock&>(layer), in, state, x, y, dy, dx, grads,
                                 scratch_of(i), pass_);
    case Op::relu:
      if (dx != nullptr) cuda::relu_backward(out.numel(), y, dy, dx, stream_);
      return;
    case Op::flatten:
      if (dx != nullptr)
        HEARSAY_CUDA_CHECK(cudaMemcpyAsync(dx, dy, static_cast<std::size_t>(out.numel()) * sizeof(float),
                                           cudaMemcpyDeviceToDevice, stream_));
      return;
    case Op::avgpool2d: {
      // With a ReLU before it whose mask it applies, x is that ReLU's output.
      const auto& avg = static_cast<const AvgPool2d&>(layer);
      if (dx != nullptr)
        cuda::avgpool_backward(avg.geometry(in), in[0] * in[1], dy, dx, avg.mask_by_positive_input() ? x : nullptr,
                               stream_);
      return;
    }
    case Op::maxpool2d:
      if (dx != nullptr)
        cuda::maxpool_backward(static_cast<const MaxPool2d&>(layer).geometry(in), in[0] * in[1], x, dy, dx,
                               stream_);
      return;
    case Op::global_avgpool2d:
      if (dx != nullptr) cuda::global_avgpool_backward(in[0] * in[1], in[2] * in[3], dy, dx, stream_);
      return;
    default:
      cannot_run(i, layer);
  }
}

}  // namespace hearsay
