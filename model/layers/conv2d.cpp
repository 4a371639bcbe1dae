#include "model/layers/conv2d.hpp"

#include <stdexcept>

#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/conv.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/small_gemm.hpp"
#include "kernels/cpu/vector.hpp"

namespace hearsay {

Conv2d::Conv2d(int in_channels, int out_channels, int kernel, int stride, int padding, Init init)
    : in_(in_channels), out_(out_channels), kernel_(kernel), stride_(stride), padding_(padding), init_(init) {
  if (in_ <= 0 || out_ <= 0 || kernel_ <= 0 || stride_ <= 0 || padding_ < 0)
    throw std::invalid_argument("Conv2d: channels, kernel and stride must be positive, padding >= 0");
}

std::string Conv2d::describe() const {
  return "conv2d(" + std::to_string(in_) + "," + std::to_string(out_) + ",k" + std::to_string(kernel_) +
         ",s" + std::to_string(stride_) + ",p" + std::to_string(padding_) + ")";
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
  cpu::fill(static_cast<std::size_t>(out_), 0.0f, weights() + weight_count());
}

std::int64_t Conv2d::scratch_floats(const Shape& input) const {
  if (is_pointwise()) return 0;
  const auto g = geometry(input);
  // forward's columns, or backward's pixel rows and then their gradient (same size)
  return static_cast<std::int64_t>(g.col_rows()) * g.col_cols();
}

void Conv2d::forward(ConstTensorView x, TensorView y, float* scratch) const {
  const auto g = geometry(x.shape);
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
    cpu::bias_rows(out_, cols, w + weight_count(), fused_relu_, out);
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
  if (x.shape[0] == 0) cpu::fill(static_cast<std::size_t>(param_count()), 0.0f, gw);
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
    cpu::bias_grad_rows(out_, cols, d, n > 0, gb);
    if (!dx) continue;
    // dR[pixels x rows] = dy_n^T[pixels x out] * W[out x rows], written over R (no longer
    // needed), then summed back into the image.
    cpu::small_gemm(cols, rows, out_, d, 1, cols, w, rows, pixel_rows, rows, false);
    cpu::row2im(g, pixel_rows, dx + n * in_item);
  }
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
    cpu::bias_grad_rows(out_, cols, d, n > 0, gb);
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
