#include "model/layers/batchnorm2d.hpp"

#include <cmath>
#include <stdexcept>

#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/vector.hpp"

namespace hearsay {

BatchNorm2d::BatchNorm2d(int channels, float momentum, float eps)
    : channels_(channels), momentum_(momentum), eps_(eps) {
  if (channels <= 0) throw std::invalid_argument("BatchNorm2d: channels must be positive");
  if (!(momentum >= 0 && momentum <= 1))
    throw std::invalid_argument("BatchNorm2d: momentum must be in [0, 1]");
  if (!(eps > 0)) throw std::invalid_argument("BatchNorm2d: eps must be positive");
}

std::string BatchNorm2d::describe() const { return "batchnorm2d(" + std::to_string(channels_) + ")"; }

Shape BatchNorm2d::output_shape(const Shape& input) const {
  if (input.rank() != 4 || input[1] != channels_)
    throw std::invalid_argument(describe() + ": expects input [N," + std::to_string(channels_) +
                                ",H,W], got " + input.str());
  return input;
}

cpu::BatchNormShape BatchNorm2d::shape_of(const Shape& input) const {
  return {input[0], channels_, input[2] * input[3]};
}

void BatchNorm2d::init_params(Rng&) {
  cpu::fill(static_cast<std::size_t>(channels_), 1.0f, weights());
  cpu::fill(static_cast<std::size_t>(channels_), 0.0f, weights() + channels_);
}

void BatchNorm2d::init_buffers() {
  cpu::fill(static_cast<std::size_t>(channels_), 0.0f, running_mean());
  cpu::fill(static_cast<std::size_t>(channels_), 1.0f, running_var());
  *batches_tracked() = 0.0f;
}

void BatchNorm2d::forward(ConstTensorView x, TensorView y, float* scratch, Pass pass) const {
  const cpu::BatchNormShape s = shape_of(x.shape);
  const bool training = pass != Pass::eval;
  scratch[0] = training ? 1.0f : 0.0f;
  float* mean = scratch + kScratchHeader;
  float* invstd = mean + channels_;
  float* scale = invstd + channels_;
  float* shift = scale + channels_;
  if (training) {
    const long m = s.per_channel();
    if (m < 2)
      throw std::invalid_argument(
          describe() + ": a training pass needs more than one value per channel, got " + x.shape.str());
    float* variance = scale;  // until the scale is worked out from it
    cpu::batchnorm_moments(s, x.data, mean, variance);
    const float unbiased = static_cast<float>(m) / static_cast<float>(m - 1);
    for (int c = 0; c < channels_; ++c) {
      invstd[c] = 1.0f / std::sqrt(variance[c] + eps_);
      if (pass == Pass::train) {
        running_mean()[c] = (1 - momentum_) * running_mean()[c] + momentum_ * mean[c];
        running_var()[c] = (1 - momentum_) * running_var()[c] + momentum_ * variance[c] * unbiased;
      }
    }
    if (pass == Pass::train) *batches_tracked() += 1.0f;
  } else {
    for (int c = 0; c < channels_; ++c) {
      mean[c] = running_mean()[c];
      invstd[c] = 1.0f / std::sqrt(running_var()[c] + eps_);
    }
  }
  // y = x * scale + shift with scale = gamma * invstd, shift = beta - mean * scale.
  const float* gamma = weights();
  const float* beta = weights() + channels_;
  for (int c = 0; c < channels_; ++c) {
    scale[c] = gamma[c] * invstd[c];
    shift[c] = beta[c] - mean[c] * scale[c];
  }
  cpu::batchnorm_apply(s, x.data, scale, shift, fused_relu_, y.data);
}

void BatchNorm2d::backward(ConstTensorView x, ConstTensorView y, TensorView dy, float* dx, float* grads,
                           float* scratch) const {
  const cpu::BatchNormShape s = shape_of(x.shape);
  const bool training = scratch[0] != 0.0f;
  const float* mean = scratch + kScratchHeader;
  const float* invstd = mean + channels_;
  if (masks_own_relu()) cpu::relu_backward(dy.numel(), y.data, dy.data, dy.data);
  float* dgamma = grads + param_offset();
  float* dbeta = dgamma + channels_;
  cpu::batchnorm_param_grads(s, x.data, dy.data, mean, invstd, dgamma, dbeta);
  if (!dx) return;
  const float* gamma = weights();
  if (training)
    return cpu::batchnorm_input_grad_train(s, x.data, dy.data, mean, invstd, gamma, dgamma, dbeta, dx);
  // Evaluation: the statistics are constants, so the layer is affine in x, dx = dy * scale
  // with forward's scale (still in the scratch: the weights have not changed since).
  const float* scale = invstd + channels_;
  float* zero = scratch + kScratchHeader + 3 * channels_;  // forward's shift, no longer needed
  cpu::fill(static_cast<std::size_t>(channels_), 0.0f, zero);
  cpu::batchnorm_apply(s, dy.data, scale, zero, false, dx);
}

}  // namespace hearsay
