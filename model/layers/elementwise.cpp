#include "model/layers/elementwise.hpp"

#include <cstring>

#include "kernels/cpu/activation.hpp"

namespace hearsay {

void ReLU::forward(ConstTensorView x, TensorView y, float*, Pass) const {
  cpu::relu_forward(x.numel(), x.data, y.data);
}

void ReLU::backward(ConstTensorView, ConstTensorView y, TensorView dy, float* dx, float*, float*) const {
  if (dx) cpu::relu_backward(y.numel(), y.data, dy.data, dx);
}

void Flatten::forward(ConstTensorView x, TensorView y, float*, Pass) const {
  std::memcpy(y.data, x.data, sizeof(float) * static_cast<std::size_t>(x.numel()));
}

void Flatten::backward(ConstTensorView x, ConstTensorView, TensorView dy, float* dx, float*, float*) const {
  if (dx) std::memcpy(dx, dy.data, sizeof(float) * static_cast<std::size_t>(x.numel()));
}

}  // namespace hearsay
