// Average and max pooling over each channel plane (window k, stride s, no padding), and
// global average pooling (each plane to its mean).
#pragma once
#include "kernels/cpu/pool.hpp"
#include "model/layer.hpp"

namespace hearsay {

class Pool2d : public Layer {
 public:
  Shape output_shape(const Shape& input) const override;
  // The pooling of an input of this shape [N, C, H, W], as the kernels take it.
  cpu::PoolGeometry geometry(const Shape& input) const;

 protected:
  Pool2d(int kernel, int stride);
  std::string params_text() const;
  int kernel_, stride_;
};

class AvgPool2d final : public Pool2d {
 public:
  Op op() const override { return Op::avgpool2d; }
  explicit AvgPool2d(int kernel, int stride = 0) : Pool2d(kernel, stride) {}
  // The input is a ReLU output whose mask this layer applies: dx = 0 where x <= 0.
  void set_mask_by_positive_input(bool on) { mask_by_positive_input_ = on; }
  bool mask_by_positive_input() const { return mask_by_positive_input_; }
  std::string describe() const override { return "avgpool2d(" + params_text() + ")"; }
  void forward(ConstTensorView x, TensorView y, float* scratch, Pass pass) const override;
  void backward(ConstTensorView x, ConstTensorView y, TensorView dy, float* dx, float* grads,
                float* scratch) const override;

 private:
  bool mask_by_positive_input_ = false;
};

class MaxPool2d final : public Pool2d {
 public:
  Op op() const override { return Op::maxpool2d; }
  explicit MaxPool2d(int kernel, int stride = 0) : Pool2d(kernel, stride) {}
  std::string describe() const override { return "maxpool2d(" + params_text() + ")"; }
  void forward(ConstTensorView x, TensorView y, float* scratch, Pass pass) const override;
  void backward(ConstTensorView x, ConstTensorView y, TensorView dy, float* dx, float* grads,
                float* scratch) const override;
};

// [N, C, H, W] -> [N, C]: the mean of each plane (ResNet's head; the output needs no
// Flatten). Backward spreads dy / (H W) over the plane.
class GlobalAvgPool2d final : public Layer {
 public:
  Op op() const override { return Op::global_avgpool2d; }
  std::string describe() const override { return "globalavgpool2d"; }
  Shape output_shape(const Shape& input) const override;
  void forward(ConstTensorView x, TensorView y, float* scratch, Pass pass) const override;
  void backward(ConstTensorView x, ConstTensorView y, TensorView dy, float* dx, float* grads,
                float* scratch) const override;
};

}  // namespace hearsay
