#include "model/layers/conv2d.hpp"

#include <stdexcept>

#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/vector.hpp"

namespace hearsay {

Conv2d::Conv2d(int in_channels, int out_channels, int kernel, int stride, int padding, Init init)
    : in_(in_channels), out_(out_channels), kernel_(kernel), stride_(stride), padding_(padding), init_(init) {
  if (in_ <= 0 || out_ <= 0 || kernel_ <= 0 || stride_ <= 0 || padding_ < 0)
    throw std::invalid_argument("Conv2d: channels, kernel and stride must be positive, padding >= 0");
}

std::string Conv2d::describe() const {
  return "conv2d(" + std::to_string(in_) + "," + std::to_string(out_) + ",k" + std::to_string(kernel_) + ",s" +
         std::to_string(stride_) + ",p" + std::to_string(padding_) + ")";
}

cpu::ConvGeometry Conv2d::geometry(const Shape& input) const {
  return cpu::ConvGeometry{static_cast<int>(input[1]), static_cast<int>(input[2]), static_cast<int>(input[3]),
                           kernel_, kernel_, stride_, padding_};
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
  return 2 * static_cast<std::int64_t>(g.col_rows()) * g.col_cols();  // columns + their gradient
}

void Conv2d::forward(ConstTensorView x, TensorView y, float* scratch) const {
  const auto g = geometry(x.shape);
  const int rows = g.col_rows(), cols = g.col_cols();
  const std::int64_t in_item = x.shape.per_item(), out_item = static_cast<std::int64_t>(out_) * cols;
  const float* w = weights();
  for (std::int64_t n = 0; n < x.shape[0]; ++n) {
    const float* image = x.data + n * in_item;
    const float* columns = image;
    if (!is_pointwise()) {
      cpu::im2col(g, image, scratch);
      columns = scratch;
    }
    float* out = y.data + n * out_item;
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
  float* columns = scratch;
  float* dcolumns = scratch + static_cast<std::int64_t>(rows) * cols;
  for (std::int64_t n = 0; n < x.shape[0]; ++n) {
    const float* image = x.data + n * in_item;
    const float* d = dy.data + n * out_item;
    const float* cols_n = image;
    if (!is_pointwise()) {
      cpu::im2col(g, image, columns);
      cols_n = columns;
    }
    const float beta = n == 0 ? 0.0f : 1.0f;
    // dW[out x rows] += dy_n[out x cols] * columns^T[cols x rows]
    cpu::sgemm(false, true, out_, rows, cols, 1.0f, d, cols, cols_n, cols, beta, gw, rows);
    cpu::bias_grad_rows(out_, cols, d, n > 0, gb);
    if (!dx) continue;
    float* dimage = dx + n * in_item;
    // dcolumns[rows x cols] = W^T[rows x out] * dy_n[out x cols], then scatter back
    float* target = is_pointwise() ? dimage : dcolumns;
    cpu::sgemm(true, false, rows, cols, out_, 1.0f, w, rows, d, cols, 0.0f, target, cols);
    if (!is_pointwise()) cpu::col2im(g, dcolumns, cols, dimage);
  }
}

}  // namespace hearsay
