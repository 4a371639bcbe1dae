// BatchNorm2d with PyTorch's semantics (momentum 0.1, eps 1e-5). A training pass
// normalises each channel with the batch's mean and biased variance and moves the running
// statistics towards them (running = (1 - momentum) running + momentum batch, with the
// unbiased variance M / (M - 1) var, M = N x H x W); an evaluation pass normalises with
// the running statistics. Parameters: weight (gamma) [C] then bias (beta) [C]. Buffers,
// after every parameter in the flat state: running_mean [C], running_var [C] and
// num_batches_tracked (one float, an int64 in a state_dict).
#pragma once
#include "kernels/cpu/batchnorm.hpp"
#include "model/layer.hpp"

namespace hearsay {

class BatchNorm2d final : public Layer {
 public:
  Op op() const override { return Op::batchnorm2d; }
  explicit BatchNorm2d(int channels, float momentum = 0.1f, float eps = 1e-5f);
  std::string describe() const override;
  Shape output_shape(const Shape& input) const override;
  std::int64_t param_count() const override { return 2 * channels_; }
  std::vector<ParamTensor> param_tensors() const override {
    return {{"weight", Shape{channels_}}, {"bias", Shape{channels_}}};
  }
  void init_params(Rng& rng) override;
  std::int64_t buffer_count() const override { return 2 * channels_ + 1; }
  std::vector<BufferTensor> buffer_tensors() const override {
    return {{"running_mean", Shape{channels_}},
            {"running_var", Shape{channels_}},
            {"num_batches_tracked", Shape{}, true}};
  }
  void init_buffers() override;
  // Forward keeps the pass, and the mean and 1/std it normalised with, for backward; then
  // room for the per-channel scale and shift it applies.
  std::int64_t scratch_floats(const Shape& /*input*/) const override {
    return kScratchHeader + 4 * channels_;
  }
  bool can_fuse_relu() const override { return true; }
  void forward(ConstTensorView x, TensorView y, float* scratch, Pass pass) const override;
  void backward(ConstTensorView x, ConstTensorView y, TensorView dy, float* dx, float* grads,
                float* scratch) const override;

  int channels() const { return channels_; }
  float momentum() const { return momentum_; }
  float eps() const { return eps_; }
  float* running_mean() const { return buffers(); }
  float* running_var() const { return buffers() + channels_; }
  float* batches_tracked() const { return buffers() + 2 * channels_; }

 private:
  static constexpr int kScratchHeader = 16;  // the pass, padded to keep the rest aligned
  cpu::BatchNormShape shape_of(const Shape& input) const;

  int channels_;
  float momentum_, eps_;
};

}  // namespace hearsay
