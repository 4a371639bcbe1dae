// 2-D convolution (cross-correlation, as in PyTorch) with stride and zero padding.
// Weights [out_ch x in_ch x k x k] then bias [out_ch], PyTorch's order and layout; a
// convolution followed by BatchNorm has no bias (BatchNorm's shift would cancel it).
// 5x5 kernels with stride 1 (LeNet's second convolution) run as Winograd F(3x3, 5x5)
// (kernels/cpu/winograd.hpp): 49 GEMMs over groups of tiles, 4.6x fewer multiplications;
// 3x3 stride-1 kernels with >= 8 input channels (ResNet-20's blocks) as F(4x4, 3x3):
// 36 GEMMs, 4x fewer.
// Other shapes: each image is one im2col + one GEMM forward, one im2row + two GEMMs
// backward (small_gemm); per-image products keep the column matrix in L2.
#pragma once
#include "kernels/cpu/conv.hpp"
#include "model/layer.hpp"

namespace hearsay {

class Conv2d final : public Layer {
 public:
  Op op() const override { return Op::conv2d; }
  enum class Bias { with, without };
  Conv2d(int in_channels, int out_channels, int kernel, int stride = 1, int padding = 0,
         Init init = Init::kaiming_uniform, Bias bias = Bias::with);
  std::string describe() const override;
  Shape output_shape(const Shape& input) const override;
  std::int64_t param_count() const override { return weight_count() + (has_bias_ ? out_ : 0); }
  // weight [out, in, k, k] (im2col rows run over channel, kernel row, kernel column) then
  // bias [out] when it has one.
  std::vector<ParamTensor> param_tensors() const override {
    std::vector<ParamTensor> t{{"weight", Shape{out_, in_, kernel_, kernel_}}};
    if (has_bias_) t.push_back({"bias", Shape{out_}});
    return t;
  }
  bool has_bias() const { return has_bias_; }
  void init_params(Rng& rng) override;
  int out_channels() const { return out_; }
  // The convolution of an input of this shape [N, C, H, W], as the kernels take it.
  cpu::ConvGeometry geometry(const Shape& input) const;
  std::int64_t scratch_floats(const Shape& input) const override;
  bool can_fuse_relu() const override { return true; }
  void forward(ConstTensorView x, TensorView y, float* scratch, Pass pass) const override;
  void backward(ConstTensorView x, ConstTensorView y, TensorView dy, float* dx, float* grads,
                float* scratch) const override;

 private:
  std::int64_t weight_count() const { return static_cast<std::int64_t>(out_) * in_ * kernel_ * kernel_; }
  bool uses_small_gemm(const cpu::ConvGeometry& g) const;
  bool uses_winograd(const cpu::ConvGeometry& g) const;
  struct WinogradScratch;
  void forward_winograd(ConstTensorView x, TensorView y, float* scratch) const;
  void backward_winograd(ConstTensorView x, ConstTensorView dy, float* dx, float* gw, float* gb,
                         float* scratch) const;
  void backward_columns(ConstTensorView x, ConstTensorView dy, float* dx, float* gw, float* gb,
                        float* scratch) const;
  bool is_pointwise() const { return kernel_ == 1 && stride_ == 1 && padding_ == 0; }
  // The epilogue of one image's output [out x pixels]: bias and the fused ReLU.
  void epilogue(long pixels, float* out) const;
  void bias_grad(long pixels, const float* dy, bool accumulate, float* gb) const;

  int in_, out_, kernel_, stride_, padding_;
  Init init_;
  bool has_bias_;
};

}  // namespace hearsay
