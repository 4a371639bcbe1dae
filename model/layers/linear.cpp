#include "model/layers/linear.hpp"

#include <stdexcept>

#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/vector.hpp"

namespace hearsay {

Linear::Linear(int in_features, int out_features, Init init)
    : in_(in_features), out_(out_features), init_(init) {
  if (in_ <= 0 || out_ <= 0) throw std::invalid_argument("Linear: feature counts must be positive");
}

std::string Linear::describe() const {
  return "linear(" + std::to_string(in_) + "," + std::to_string(out_) + ")";
}

Shape Linear::output_shape(const Shape& input) const {
  if (input.per_item() != in_ && input[0] != 0)
    throw std::invalid_argument(describe() + ": input " + input.str() + " does not have " +
                                std::to_string(in_) + " features per item");
  return Shape{input[0], out_};
}

void Linear::init_params(Rng& rng) {
  init_weights(init_, weights(), static_cast<std::int64_t>(out_) * in_, in_, out_, rng);
  cpu::fill(static_cast<std::size_t>(out_), 0.0f, weights() + static_cast<std::int64_t>(out_) * in_);
}

void Linear::forward(ConstTensorView x, TensorView y, float*, Pass) const {
  const int batch = static_cast<int>(x.shape[0]);
  const float* w = weights();
  const float* b = w + static_cast<std::int64_t>(out_) * in_;
  cpu::sgemm(false, true, batch, out_, in_, 1.0f, x.data, in_, w, in_, 0.0f, y.data, out_);
  cpu::bias_cols(batch, out_, b, fused_relu_, y.data);
}

void Linear::backward(ConstTensorView x, ConstTensorView y, TensorView dy, float* dx, float* grads,
                      float*) const {
  const int batch = static_cast<int>(x.shape[0]);
  float* gw = grads + param_offset();
  float* gb = gw + static_cast<std::int64_t>(out_) * in_;
  if (masks_own_relu()) cpu::relu_backward(dy.numel(), y.data, dy.data, dy.data);
  if (batch == 0) {
    cpu::fill(static_cast<std::size_t>(param_count()), 0.0f, gw);
    return;
  }
  // dW[out x in] = dy^T[out x batch] * x[batch x in]
  cpu::sgemm(true, false, out_, in_, batch, 1.0f, dy.data, out_, x.data, in_, 0.0f, gw, in_);
  cpu::bias_grad_cols(batch, out_, dy.data, gb);
  // dx[batch x in] = dy[batch x out] * W[out x in]
  if (dx) cpu::sgemm(false, false, batch, in_, out_, 1.0f, dy.data, out_, weights(), in_, 0.0f, dx, in_);
}

}  // namespace hearsay
