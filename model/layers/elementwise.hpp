// Layers without parameters that do not look at neighbourhoods: ReLU and Flatten.
#pragma once
#include "model/layer.hpp"

namespace hearsay {

class ReLU final : public Layer {
 public:
  Op op() const override { return Op::relu; }
  std::string describe() const override { return "relu"; }
  Shape output_shape(const Shape& input) const override { return input; }
  void forward(ConstTensorView x, TensorView y, float* scratch, Pass pass) const override;
  void backward(ConstTensorView x, ConstTensorView y, TensorView dy, float* dx, float* grads,
                float* scratch) const override;
};

// [N, C, H, W] -> [N, C*H*W]. The data is already in that order, so both passes copy.
class Flatten final : public Layer {
 public:
  Op op() const override { return Op::flatten; }
  std::string describe() const override { return "flatten"; }
  Shape output_shape(const Shape& input) const override { return Shape{input[0], input.per_item()}; }
  void forward(ConstTensorView x, TensorView y, float* scratch, Pass pass) const override;
  void backward(ConstTensorView x, ConstTensorView y, TensorView dy, float* dx, float* grads,
                float* scratch) const override;
};

}  // namespace hearsay
