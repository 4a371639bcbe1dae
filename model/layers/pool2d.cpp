#include "model/layers/pool2d.hpp"

#include <stdexcept>

namespace hearsay {

Pool2d::Pool2d(int kernel, int stride) : kernel_(kernel), stride_(stride == 0 ? kernel : stride) {
  if (kernel_ <= 0 || stride_ <= 0)
    throw std::invalid_argument("pooling: kernel and stride must be positive");
}

std::string Pool2d::params_text() const {
  return "k" + std::to_string(kernel_) + ",s" + std::to_string(stride_);
}

cpu::PoolGeometry Pool2d::geometry(const Shape& input) const {
  return cpu::PoolGeometry{static_cast<int>(input[2]), static_cast<int>(input[3]), kernel_, stride_};
}

Shape Pool2d::output_shape(const Shape& input) const {
  if (input.rank() != 4 || input[2] < kernel_ || input[3] < kernel_)
    throw std::invalid_argument(describe() + ": expects input [N,C,H,W] with H,W >= " +
                                std::to_string(kernel_) + ", got " + input.str());
  const auto g = geometry(input);
  return Shape{input[0], input[1], g.out_h(), g.out_w()};
}

void AvgPool2d::forward(ConstTensorView x, TensorView y, float*, Pass) const {
  cpu::avgpool_forward(geometry(x.shape), static_cast<long>(x.shape[0] * x.shape[1]), x.data, y.data);
}

void AvgPool2d::backward(ConstTensorView x, ConstTensorView, TensorView dy, float* dx, float*, float*) const {
  if (!dx) return;
  const long planes = static_cast<long>(x.shape[0] * x.shape[1]);
  cpu::avgpool_backward(geometry(x.shape), planes, dy.data, dx, mask_by_positive_input_ ? x.data : nullptr);
}

void MaxPool2d::forward(ConstTensorView x, TensorView y, float*, Pass) const {
  cpu::maxpool_forward(geometry(x.shape), static_cast<long>(x.shape[0] * x.shape[1]), x.data, y.data);
}

void MaxPool2d::backward(ConstTensorView x, ConstTensorView, TensorView dy, float* dx, float*, float*) const {
  if (dx)
    cpu::maxpool_backward(geometry(x.shape), static_cast<long>(x.shape[0] * x.shape[1]), x.data, dy.data, dx);
}

Shape GlobalAvgPool2d::output_shape(const Shape& input) const {
  if (input.rank() != 4 || input[2] < 1 || input[3] < 1)
    throw std::invalid_argument("globalavgpool2d: expects input [N,C,H,W], got " + input.str());
  return Shape{input[0], input[1]};
}

void GlobalAvgPool2d::forward(ConstTensorView x, TensorView y, float*, Pass) const {
  const long planes = static_cast<long>(x.shape[0] * x.shape[1]);
  const long pixels = static_cast<long>(x.shape[2] * x.shape[3]);
  const float inv = 1.0f / static_cast<float>(pixels);
  for (long p = 0; p < planes; ++p) {
    const float* in = x.data + p * pixels;
    float sum = 0;
    for (long k = 0; k < pixels; ++k) sum += in[k];
    y.data[p] = sum * inv;
  }
}

void GlobalAvgPool2d::backward(ConstTensorView x, ConstTensorView, TensorView dy, float* dx, float*,
                               float*) const {
  if (!dx) return;
  const long planes = static_cast<long>(x.shape[0] * x.shape[1]);
  const long pixels = static_cast<long>(x.shape[2] * x.shape[3]);
  const float inv = 1.0f / static_cast<float>(pixels);
  for (long p = 0; p < planes; ++p) {
    const float g = dy.data[p] * inv;
    float* out = dx + p * pixels;
    for (long k = 0; k < pixels; ++k) out[k] = g;
  }
}

}  // namespace hearsay
