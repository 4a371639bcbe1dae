// Fully connected layer: y = x W^T + b, with W stored [out x in] as in PyTorch, so a
// checkpoint's tensors load into torch.nn.Linear unchanged.
#pragma once
#include "model/layer.hpp"

namespace hearsay {

class Linear final : public Layer {
 public:
  Op op() const override { return Op::linear; }
  Linear(int in_features, int out_features, Init init = Init::kaiming_uniform);
  std::string describe() const override;
  Shape output_shape(const Shape& input) const override;
  std::int64_t param_count() const override { return static_cast<std::int64_t>(out_) * in_ + out_; }
  // weight [out, in] then bias [out].
  std::vector<ParamTensor> param_tensors() const override {
    return {{"weight", Shape{out_, in_}}, {"bias", Shape{out_}}};
  }
  void init_params(Rng& rng) override;
  int in_features() const { return in_; }
  int out_features() const { return out_; }
  bool can_fuse_relu() const override { return true; }
  void forward(ConstTensorView x, TensorView y, float* scratch, Pass pass) const override;
  void backward(ConstTensorView x, ConstTensorView y, TensorView dy, float* dx, float* grads,
                float* scratch) const override;

 private:
  int in_, out_;
  Init init_;
};

}  // namespace hearsay
