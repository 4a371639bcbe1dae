#include "model/layers/conv2d.hpp"

#include <algorithm>
#include <stdexcept>

#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/conv.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/small_gemm.hpp"
#include "kernels/cpu/vector.hpp"
#include "kernels/cpu/winograd.hpp"

namespace hearsay {

Conv2d::Conv2d(int in_channels, int out_channels, int kernel, int stride, int padding, Init init, Bias bias)
    : in_(in_channels),
      out_(out_channels),
      kernel_(kernel),
      stride_(stride),
      padding_(padding),
      init_(init),
      has_bias_(bias == Bias::with) {
  if (in_ <= 0 || out_ <= 0 || kernel_ <= 0 || stride_ <= 0 || padding_ < 0)
    throw std::invalid_argument("Conv2d: channels, kernel and stride must be positive, padding >= 0");
}

std::string Conv2d::describe() const {
  return "conv2d(" + std::to_string(in_) + "," + std::to_string(out_) + ",k" + std::to_string(kernel_) +
         ",s" + std::to_string(stride_) + ",p" + std::to_string(padding_) + (has_bias_ ? "" : ",nobias") +
         ")";
}

void Conv2d::epilogue(long pixels, float* out) const {
  if (has_bias_)
    cpu::bias_rows(out_, pixels, weights() + weight_count(), fused_relu_, out);
  else if (fused_relu_)
    cpu::relu_forward(out_ * pixels, out, out);
}

void Conv2d::bias_grad(long pixels, const float* dy, bool accumulate, float* gb) const {
  if (has_bias_) cpu::bias_grad_rows(out_, pixels, dy, accumulate, gb);
}

cpu::ConvGeometry Conv2d::geometry(const Shape& input) const {
  return cpu::ConvGeometry{static_cast<int>(input[1]),
                           static_cast<int>(input[2]),
                           static_cast<int>(input[3]),
                           kernel_,
                           kernel_,
                           stride_,
                           padding_};
}

Shape Conv2d::output_shape(const Shape& input) const {
  if (input.rank() != 4 || input[1] != in_)
    throw std::invalid_argument(describe() + ": expects input [N," + std::to_string(in_) + ",H,W], got " +
                                input.str());
  const auto g = geometry(input);
  if (g.height + 2 * padding_ < kernel_ || g.width + 2 * padding_ < kernel_)
    throw std::invalid_argument(describe() + ": input " + input.str() + " is smaller than the kernel");
  return Shape{input[0], out_, g.out_h(), g.out_w()};
}

void Conv2d::init_params(Rng& rng) {
  const std::int64_t k2 = static_cast<std::int64_t>(kernel_) * kernel_;
  init_weights(init_, weights(), weight_count(), in_ * k2, out_ * k2, rng);
  if (has_bias_) cpu::fill(static_cast<std::size_t>(out_), 0.0f, weights() + weight_count());
}

namespace {
// Tiles per Winograd group: the group's transformed input (alpha^2 x C x 32), its GEMM
// outputs (alpha^2 x K x 32) and the transformed filters stay in L2 for LeNet's C = 20,
// K = 50, and 32 columns fill two 16-lane vectors in small_gemm.
constexpr long kWinogradGroup = 32;

long winograd_groups(const cpu::WinogradTiling& tiling, std::int64_t batch) {
  return (batch * tiling.tiles_per_image() + kWinogradGroup - 1) / kWinogradGroup;
}
}  // namespace

// Winograd scratch (P = alpha^2 positions): U [P][K][C] and dU [P][C][K]; the whole
// batch's transformed input, group by group, kept from forward for the weight gradient;
// one group's GEMM outputs (forward), or its transformed output gradient, that
// transposed, and its input gradient (backward).
struct Conv2d::WinogradScratch {
  long positions;
  float *u, *du, *v, *work;
  WinogradScratch(float* scratch, long p, long in, long out, long groups)
      : positions(p),
        u(scratch),
        du(u + p * out * in),
        v(du + p * out * in),
        work(v + p * in * kWinogradGroup * groups) {}
  static std::int64_t floats(long p, long in, long out, long groups) {
    return p * (2 * out * in + in * kWinogradGroup * groups + (2 * out + in) * kWinogradGroup);
  }
  float* v_group(long group, long in) const { return v + group * positions * in * kWinogradGroup; }
};

std::int64_t Conv2d::scratch_floats(const Shape& input) const {
  if (is_pointwise()) return 0;
  const auto g = geometry(input);
  if (uses_winograd(g)) {
    const cpu::WinogradTiling tiling(g);
    return WinogradScratch::floats(tiling.positions(), in_, out_, winograd_groups(tiling, input[0]));
  }
  // forward's columns, or backward's pixel rows and then their gradient (same size)
  return static_cast<std::int64_t>(g.col_rows()) * g.col_cols();
}

void Conv2d::forward(ConstTensorView x, TensorView y, float* scratch, Pass) const {
  const auto g = geometry(x.shape);
  if (uses_winograd(g)) return forward_winograd(x, y, scratch);
  const int rows = g.col_rows(), cols = g.col_cols();
  const std::int64_t in_item = x.shape.per_item(), out_item = static_cast<std::int64_t>(out_) * cols;
  const float* w = weights();
  const bool small = uses_small_gemm(g);
  for (std::int64_t n = 0; n < x.shape[0]; ++n) {
    const float* image = x.data + n * in_item;
    const float* columns = image;
    if (!is_pointwise()) {
      cpu::im2col(g, image, scratch);
      columns = scratch;
    }
    float* out = y.data + n * out_item;
    // out[out x cols] = W[out x rows] * columns[rows x cols]
    if (small)
      cpu::small_gemm(out_, cols, rows, w, rows, 1, columns, cols, out, cols, false);
    else
      cpu::sgemm(false, false, out_, cols, rows, 1.0f, w, rows, columns, cols, 0.0f, out, cols);
    epilogue(cols, out);
  }
}

void Conv2d::backward(ConstTensorView x, ConstTensorView y, TensorView dy, float* dx, float* grads,
                      float* scratch) const {
  const auto g = geometry(x.shape);
  const int rows = g.col_rows(), cols = g.col_cols();
  const std::int64_t in_item = x.shape.per_item(), out_item = static_cast<std::int64_t>(out_) * cols;
  const float* w = weights();
  float* gw = grads + param_offset();
  float* gb = gw + weight_count();
  if (masks_own_relu()) cpu::relu_backward(dy.numel(), y.data, dy.data, dy.data);
  if (x.shape[0] == 0) return cpu::fill(static_cast<std::size_t>(param_count()), 0.0f, gw);
  if (uses_winograd(g)) return backward_winograd(x, dy, dx, gw, gb, scratch);
  if (!uses_small_gemm(g)) return backward_columns(x, dy, dx, gw, gb, scratch);
  // The backward products run on the pixel-major layout R[pixels x rows] (im2row): both
  // have N = rows, which small_gemm tiles with few wasted lanes. R is rebuilt from the
  // input rather than kept from forward: a batch of columns would not stay in L2.
  float* pixel_rows = scratch;
  for (std::int64_t n = 0; n < x.shape[0]; ++n) {
    const float* d = dy.data + n * out_item;
    cpu::im2row(g, x.data + n * in_item, pixel_rows);
    // dW[out x rows] += dy_n[out x pixels] * R[pixels x rows]
    cpu::small_gemm(out_, rows, cols, d, cols, 1, pixel_rows, rows, gw, rows, n > 0);
    bias_grad(cols, d, n > 0, gb);
    if (!dx) continue;
    // dR[pixels x rows] = dy_n^T[pixels x out] * W[out x rows], written over R (no longer
    // needed), then summed back into the image.
    cpu::small_gemm(cols, rows, out_, d, 1, cols, w, rows, pixel_rows, rows, false);
    cpu::row2im(g, pixel_rows, dx + n * in_item);
  }
}

bool Conv2d::uses_winograd(const cpu::ConvGeometry& g) const {
  // With few input channels the GEMMs are short (K = C) and the transforms dominate.
  // 3x3 (F(4x4, 3x3)), forward plus backward at batch 128, one AVX-512 core: 8 channels
  // on 28x28 take 6.8 ms against 7.9 through im2col/im2row, 16 on 28x28 14 against 23,
  // 64 on 7x7 7 against 18; the 1-channel stems stay on the column path.
  return cpu::winograd_applies(g) && in_ >= (g.kernel_h == 3 ? 8 : 4);
}

void Conv2d::forward_winograd(ConstTensorView x, TensorView y, float* scratch) const {
  const cpu::WinogradTiling tiling(geometry(x.shape));
  const std::int64_t batch = x.shape[0];
  const long positions = tiling.positions();
  const WinogradScratch s(scratch, positions, in_, out_, winograd_groups(tiling, batch));
  cpu::winograd_filter_transform(tiling, out_, weights(), s.u);
  const long tiles = batch * tiling.tiles_per_image();
  for (long t0 = 0, group = 0; t0 < tiles; t0 += kWinogradGroup, ++group) {
    const int count = static_cast<int>(std::min(kWinogradGroup, tiles - t0));
    float* v = s.v_group(group, in_);
    cpu::winograd_input_transform(tiling, x.data, t0, count, v, kWinogradGroup);
    // M[xi][K x tiles] = U[xi][K x C] * V[xi][C x tiles]
    for (long xi = 0; xi < positions; ++xi)
      cpu::small_gemm(out_, count, in_, s.u + xi * out_ * in_, in_, 1, v + xi * in_ * kWinogradGroup,
                      kWinogradGroup, s.work + xi * out_ * kWinogradGroup, kWinogradGroup, false);
    cpu::winograd_output_transform(tiling, out_, s.work, kWinogradGroup, t0, count, y.data);
  }
  const int cols = tiling.g.col_cols();
  for (std::int64_t n = 0; n < batch; ++n) epilogue(cols, y.data + n * out_ * cols);
}

void Conv2d::backward_winograd(ConstTensorView x, ConstTensorView dy, float* dx, float* gw, float* gb,
                               float* scratch) const {
  const cpu::WinogradTiling tiling(geometry(x.shape));
  const std::int64_t batch = x.shape[0];
  const long positions = tiling.positions();
  const WinogradScratch s(scratch, positions, in_, out_, winograd_groups(tiling, batch));
  // U and V are forward's: the scratch region is kept from a layer's forward to its
  // backward, and the weights do not change in between.
  if (dx) cpu::fill(static_cast<std::size_t>(x.shape.numel()), 0.0f, dx);
  float* dyt = s.work;                                           // [P][K][tiles]
  float* dyt_by_tile = dyt + positions * out_ * kWinogradGroup;  // [P][tiles][K]
  float* dv = dyt_by_tile + positions * out_ * kWinogradGroup;
  const long tiles = batch * tiling.tiles_per_image();
  for (long t0 = 0, group = 0; t0 < tiles; t0 += kWinogradGroup, ++group) {
    const int count = static_cast<int>(std::min(kWinogradGroup, tiles - t0));
    const float* v = s.v_group(group, in_);
    cpu::winograd_output_grad(tiling, out_, dy.data, t0, count, dyt, kWinogradGroup);
    for (long xi = 0; xi < positions; ++xi) {
      const float* dyt_xi = dyt + xi * out_ * kWinogradGroup;
      // dU[xi][C x K] += V[xi][C x tiles] * dYt[xi]^T[tiles x K]. Both operands are
      // tile-contiguous, an A B^T product small_gemm does not take, so dYt[xi] is
      // transposed first (in 16 x 16 register blocks: cheaper than the GEMM it enables).
      float* dyt_t = dyt_by_tile + xi * out_ * kWinogradGroup;
      cpu::transpose(out_, count, dyt_xi, kWinogradGroup, dyt_t, out_);
      cpu::small_gemm(in_, out_, count, v + xi * in_ * kWinogradGroup, kWinogradGroup, 1, dyt_t, out_,
                      s.du + xi * out_ * in_, out_, group > 0);
      // dV[xi][C x tiles] = U[xi]^T[C x K] * dYt[xi][K x tiles]
      if (dx)
        cpu::small_gemm(in_, count, out_, s.u + xi * out_ * in_, 1, in_, dyt_xi, kWinogradGroup,
                        dv + xi * in_ * kWinogradGroup, kWinogradGroup, false);
    }
    if (dx) cpu::winograd_input_grad(tiling, dv, kWinogradGroup, t0, count, dx);
  }
  cpu::winograd_filter_grad(tiling, out_, s.du, gw);
  const int cols = tiling.g.col_cols();
  for (std::int64_t n = 0; n < batch; ++n) bias_grad(cols, dy.data + n * out_ * cols, n > 0, gb);
}

bool Conv2d::uses_small_gemm(const cpu::ConvGeometry& g) const {
  // Small or pointwise kernels (LeNet's first convolution: 9 rows) multiply faster in
  // OpenBLAS, whose packing is cheap at K = 9; im2row's fast path covers rows of <= 8.
  return !is_pointwise() && g.col_rows() >= 64 && g.stride == 1 && g.kernel_w <= 8;
}

// Column-layout backward through OpenBLAS (1x1 convolutions use the image itself as the
// column matrix, and need no scratch).
void Conv2d::backward_columns(ConstTensorView x, ConstTensorView dy, float* dx, float* gw, float* gb,
                              float* scratch) const {
  const auto g = geometry(x.shape);
  const int rows = g.col_rows(), cols = g.col_cols();
  const std::int64_t in_item = x.shape.per_item(), out_item = static_cast<std::int64_t>(out_) * cols;
  for (std::int64_t n = 0; n < x.shape[0]; ++n) {
    const float* image = x.data + n * in_item;
    const float* d = dy.data + n * out_item;
    const float* columns = image;
    if (!is_pointwise()) {
      cpu::im2col(g, image, scratch);
      columns = scratch;
    }
    // dW[out x rows] += dy_n[out x cols] * columns^T[cols x rows]
    cpu::sgemm(false, true, out_, rows, cols, 1.0f, d, cols, columns, cols, n == 0 ? 0.0f : 1.0f, gw, rows);
    bias_grad(cols, d, n > 0, gb);
    if (!dx) continue;
    float* dimage = dx + n * in_item;
    // dcolumns[rows x cols] = W^T[rows x out] * dy_n[out x cols], written over the columns
    // (no longer needed), then scattered back; a 1x1 convolution writes dimage directly.
    float* target = is_pointwise() ? dimage : scratch;
    cpu::sgemm(true, false, rows, cols, out_, 1.0f, weights(), rows, d, cols, 0.0f, target, cols);
    if (!is_pointwise()) cpu::col2im(g, scratch, cols, dimage);
  }
}

}  // namespace hearsay
