#include "model/layers/pool2d.hpp"

#include <stdexcept>

namespace hearsay {

Pool2d::Pool2d(int kernel, int stride) : kernel_(kernel), stride_(stride == 0 ? kernel : stride) {
  if (kernel_ <= 0 || stride_ <= 0) throw std::invalid_argument("pooling: kernel and stride must be positive");
}

std::string Pool2d::params_text() const { return "k" + std::to_string(kernel_) + ",s" + std::to_string(stride_); }

cpu::PoolGeometry Pool2d::geometry(const Shape& input) const {
  return cpu::PoolGeometry{static_cast<int>(input[2]), static_cast<int>(input[3]), kernel_, stride_};
}

Shape Pool2d::output_shape(const Shape& input) const {
  if (input.rank() != 4 || input[2] < kernel_ || input[3] < kernel_)
    throw std::invalid_argument(describe() + ": expects input [N,C,H,W] with H,W >= " + std::to_string(kernel_) +
                                ", got " + input.str());
  const auto g = geometry(input);
  return Shape{input[0], input[1], g.out_h(), g.out_w()};
}

void AvgPool2d::forward(ConstTensorView x, TensorView y, float*) const {
  cpu::avgpool_forward(geometry(x.shape), static_cast<long>(x.shape[0] * x.shape[1]), x.data, y.data);
}

void AvgPool2d::backward(ConstTensorView x, ConstTensorView, TensorView dy, float* dx, float*, float*) const {
  if (!dx) return;
  const long planes = static_cast<long>(x.shape[0] * x.shape[1]);
  cpu::avgpool_backward(geometry(x.shape), planes, dy.data, dx, mask_by_positive_input_ ? x.data : nullptr);
}

void MaxPool2d::forward(ConstTensorView x, TensorView y, float*) const {
  cpu::maxpool_forward(geometry(x.shape), static_cast<long>(x.shape[0] * x.shape[1]), x.data, y.data);
}

void MaxPool2d::backward(ConstTensorView x, ConstTensorView, TensorView dy, float* dx, float*, float*) const {
  if (dx)
    cpu::maxpool_backward(geometry(x.shape), static_cast<long>(x.shape[0] * x.shape[1]), x.data, dy.data, dx);
}

}  // namespace hearsay
