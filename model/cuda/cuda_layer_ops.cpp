#include "model/cuda/cuda_layer_ops.hpp"

#include <stdexcept>

#include "kernels/cuda/activation.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/resnet_ops.hpp"
#include "kernels/cuda/vector.hpp"
#include "model/cuda/cuda_scratch_layout.hpp"

namespace hearsay {

namespace {

cuda::BatchNormDescriptors bn_layout(const Shape& in) {
  return cuda::batchnorm_descriptors(in[0], in[1], in[2], in[3]);
}

}  // namespace

CudaLayerOps::CudaLayerOps(cudaStream_t stream) : stream_(stream), conv_plans_(dnn_), bn_plans_(dnn_) {
  blas_.set_stream(stream);
  dnn_.set_stream(stream);
}

void CudaLayerOps::conv_forward(const Conv2d& conv, const Shape& in, const float* state, const float* x,
                                float* y) {
  const int k = conv.out_channels();
  const Shape out = conv.output_shape(in);
  const float* w = state + conv.param_offset();
  conv_plans_.plan(conv.geometry(in), static_cast<int>(in[0]), k).forward(x, w, y);
  if (conv.has_bias()) {
    const float* bias = w + conv.param_count() - k;
    cuda::bias_act_rows(in[0], k, out.per_item() / k, bias, conv.fused_relu(), y, stream_);
  } else if (conv.fused_relu()) {
    cuda::relu_forward(out.numel(), y, y, stream_);
  }
}

void CudaLayerOps::conv_backward(const Conv2d& conv, const Shape& in, const float* state, const float* x,
                                 const float* dy, float* dx, float* grads) {
  const int k = conv.out_channels();
  const Shape out = conv.output_shape(in);
  cuda::ConvPlan& plan = conv_plans_.plan(conv.geometry(in), static_cast<int>(in[0]), k);
  float* gw = grads + conv.param_offset();
  plan.backward_filter(x, dy, gw);
  if (conv.has_bias())
    cuda::bias_grad_rows(in[0], k, out.per_item() / k, dy, gw + conv.param_count() - k, stream_);
  if (dx != nullptr) plan.backward_data(dy, state + conv.param_offset(), dx);
}

void CudaLayerOps::batchnorm_forward(const BatchNorm2d& bn, const Shape& in, float* state, const float* x,
                                     float* y, float* stats, Pass pass) {
  const int c = bn.channels();
  const float* gamma = state + bn.param_offset();
  const float* beta = gamma + c;
  float* running_mean = state + bn.buffer_offset();
  float* running_var = running_mean + c;
  cuda::BatchNormPlan& plan = bn_plans_.plan(bn_layout(in));
  if (pass == Pass::eval) {
    plan.forward_eval(x, y, gamma, beta, running_mean, running_var, bn.eps());
  } else {
    const bool tracks = pass == Pass::train;
    plan.forward_train(x, y, gamma, beta, bn.momentum(), bn.eps(), tracks ? running_mean : nullptr,
                       tracks ? running_var : nullptr, stats, stats + c);
    if (tracks) cuda::count_batch(running_var + c, stream_);
  }
  if (bn.fused_relu()) cuda::relu_forward(in.numel(), y, y, stream_);
}

void CudaLayerOps::batchnorm_backward(const BatchNorm2d& bn, const Shape& in, const float* state,
                                      const float* x, const float* dy, float* dx, float* grads,
                                      const float* stats, Pass pass) {
  if (pass == Pass::eval)
    throw std::logic_error(bn.describe() + ": the CUDA backend back-propagates training passes only");
  const int c = bn.channels();
  float* dgamma = grads + bn.param_offset();
  bn_plans_.plan(bn_layout(in))
      .backward(x, dy, dx, state + bn.param_offset(), dgamma, dgamma + c, bn.eps(), stats, stats + c);
}

void CudaLayerOps::block_forward(const BasicBlock& block, const Shape& in, float* state, const float* x,
                                 float* y, float* scratch, Pass pass) {
  using R = BlockScratchLayout;
  const R s(block, in);
  const Shape out = block.output_shape(in);
  float *a1 = s.at(scratch, R::a1), *b1 = s.at(scratch, R::b1), *a2 = s.at(scratch, R::a2);
  conv_forward(block.conv1(), in, state, x, a1);
  batchnorm_forward(block.bn1(), out, state, a1, b1, s.at(scratch, R::bn1_stats), pass);  // + its ReLU
  conv_forward(block.conv2(), out, state, b1, a2);
  batchnorm_forward(block.bn2(), out, state, a2, y, s.at(scratch, R::bn2_stats), pass);
  const float* shortcut = x;
  if (block.projects()) {
    // The shortcut BatchNorm's output is needed only for the sum: grad_a holds it.
    float *s1 = s.at(scratch, R::s1), *sum = s.at(scratch, R::grad_a);
    conv_forward(*block.shortcut_conv(), in, state, x, s1);
    batchnorm_forward(*block.shortcut_bn(), out, state, s1, sum, s.at(scratch, R::shortcut_stats), pass);
    shortcut = sum;
  }
  cuda::add_relu(out.numel(), shortcut, y, stream_);
}

void CudaLayerOps::block_backward(const BasicBlock& block, const Shape& in, const float* state,
                                  const float* x, const float* y, float* dy, float* dx, float* grads,
                                  float* scratch, Pass pass) {
  using R = BlockScratchLayout;
  const R s(block, in);
  const Shape out = block.output_shape(in);
  const long n = static_cast<long>(out.numel());
  const float *a1 = s.at(scratch, R::a1), *b1 = s.at(scratch, R::b1), *a2 = s.at(scratch, R::a2);
  float *grad_a = s.at(scratch, R::grad_a), *grad_b = s.at(scratch, R::grad_b);
  // g = dy masked by the final ReLU; it flows unchanged into both branches of the sum.
  cuda::relu_backward(n, y, dy, dy, stream_);
  if (block.projects()) {
    const float* s1 = s.at(scratch, R::s1);
    batchnorm_backward(*block.shortcut_bn(), out, state, s1, dy, grad_a, grads,
                       s.at(scratch, R::shortcut_stats), pass);
    conv_backward(*block.shortcut_conv(), in, state, x, grad_a, dx, grads);
  }
  batchnorm_backward(block.bn2(), out, state, a2, dy, grad_a, grads, s.at(scratch, R::bn2_stats), pass);
  conv_backward(block.conv2(), out, state, b1, grad_a, grad_b, grads);
  cuda::relu_backward(n, b1, grad_b, grad_b, stream_);  // bn1's fused ReLU
  batchnorm_backward(block.bn1(), out, state, a1, grad_b, grad_a, grads, s.at(scratch, R::bn1_stats), pass);
  conv_backward(block.conv1(), in, state, x, grad_a, dx != nullptr ? grad_b : nullptr, grads);
  if (dx == nullptr) return;
  // dx = (the shortcut's input gradient, already in dx, or g itself) + the main branch's.
  if (!block.projects())
    HEARSAY_CUDA_CHECK(cudaMemcpyAsync(dx, dy, static_cast<std::size_t>(n) * sizeof(float),
                                       cudaMemcpyDeviceToDevice, stream_));
  cuda::add(static_cast<std::size_t>(in.numel()), grad_b, dx, stream_);
}

}  // namespace hearsay
