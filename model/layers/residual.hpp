// ResNet's BasicBlock (He et al. 2016), a layer made of layers:
//   y = relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x))
// conv1 is 3x3 with the block's stride, conv2 3x3 stride 1, both padded by 1 and without
// bias; the shortcut is the identity, or a 1x1 convolution with the block's stride and a
// BatchNorm when the block changes the channel count or the resolution (the projection
// shortcut, "option B"). The parts' tensors are named as the attributes of the PyTorch
// reference module (bench/pytorch_resnet.py): conv1, bn1, conv2, bn2, shortcut.0,
// shortcut.1. The model stays a sequence of layers; the block keeps its inner activations
// in its own scratch region, from its forward to its backward.
#pragma once
#include <optional>

#include "model/layers/batchnorm2d.hpp"
#include "model/layers/conv2d.hpp"

namespace hearsay {

class BasicBlock final : public Layer {
 public:
  Op op() const override { return Op::basic_block; }
  BasicBlock(int in_channels, int out_channels, int stride);
  std::string describe() const override;
  Shape output_shape(const Shape& input) const override;
  std::int64_t param_count() const override;
  std::vector<ParamTensor> param_tensors() const override;
  void init_params(Rng& rng) override;
  std::int64_t buffer_count() const override;
  std::vector<BufferTensor> buffer_tensors() const override;
  void init_buffers() override;
  using Layer::bind;
  void bind(float* state, std::int64_t param_offset, std::int64_t buffer_offset) override;
  std::int64_t scratch_floats(const Shape& input) const override;
  void forward(ConstTensorView x, TensorView y, float* scratch, Pass pass) const override;
  void backward(ConstTensorView x, ConstTensorView y, TensorView dy, float* dx, float* grads,
                float* scratch) const override;

  // The parts, for backends that run them one by one.
  const Conv2d& conv1() const { return conv1_; }
  const BatchNorm2d& bn1() const { return bn1_; }
  const Conv2d& conv2() const { return conv2_; }
  const BatchNorm2d& bn2() const { return bn2_; }
  bool projects() const { return shortcut_conv_.has_value(); }
  const Conv2d* shortcut_conv() const { return shortcut_conv_ ? &*shortcut_conv_ : nullptr; }
  const BatchNorm2d* shortcut_bn() const { return shortcut_bn_ ? &*shortcut_bn_ : nullptr; }

 private:
  struct Scratch;
  // Each part with the name of its tensors, in flat-state order.
  std::vector<std::pair<const char*, Layer*>> parts();
  std::vector<std::pair<const char*, const Layer*>> parts() const;

  int in_, out_, stride_;
  Conv2d conv1_;
  BatchNorm2d bn1_;
  Conv2d conv2_;
  BatchNorm2d bn2_;
  std::optional<Conv2d> shortcut_conv_;
  std::optional<BatchNorm2d> shortcut_bn_;
};

}  // namespace hearsay
