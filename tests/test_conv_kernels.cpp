#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "base/rng.hpp"
#include "kernels/cpu/conv.hpp"
#include "kernels/cpu/small_gemm.hpp"
#include "kernels/cpu/winograd.hpp"
#include "model/layers/conv2d.hpp"

using namespace hearsay;

namespace {

std::vector<float> random_vector(std::size_t n, Rng& rng) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.normal());
  return v;
}

// The definition: row p = (oy, ox), column (c, ki, kj).
float image_at(const cpu::ConvGeometry& g, const std::vector<float>& img, int c, int iy, int ix) {
  if (iy < 0 || iy >= g.height || ix < 0 || ix >= g.width) return 0.0f;
  return img[(static_cast<std::size_t>(c) * g.height + iy) * g.width + ix];
}

const cpu::ConvGeometry kGeometries[] = {
    {20, 13, 13, 5, 5, 1, 0},  // LeNet's second convolution
    {1, 28, 28, 3, 3, 1, 0},   // LeNet's first
    {3, 7, 9, 3, 3, 1, 1},     // padding
    {2, 6, 21, 5, 5, 1, 2},    // wide rows, padding wider than one side
    {2, 9, 8, 3, 3, 2, 1},     // stride 2 (portable path)
    {2, 12, 12, 9, 9, 1, 0},   // kernel rows wider than 8 (portable path)
};

}  // namespace

TEST_CASE("im2row places every window pixel where the definition says", "[kernels][conv]") {
  Rng rng(5);
  for (const auto& g : kGeometries) {
    const auto img = random_vector(static_cast<std::size_t>(g.channels) * g.height * g.width, rng);
    std::vector<float> rows(static_cast<std::size_t>(g.col_rows()) * g.col_cols() + 16, -7.0f);
    cpu::im2row(g, img.data(), rows.data());
    std::size_t at = 0;
    for (int oy = 0; oy < g.out_h(); ++oy)
      for (int ox = 0; ox < g.out_w(); ++ox)
        for (int c = 0; c < g.channels; ++c)
          for (int ki = 0; ki < g.kernel_h; ++ki)
            for (int kj = 0; kj < g.kernel_w; ++kj, ++at)
              REQUIRE(rows[at] ==
                      image_at(g, img, c, oy * g.stride - g.padding + ki, ox * g.stride - g.padding + kj));
    // Nothing written past the end.
    for (std::size_t i = at; i < rows.size(); ++i) REQUIRE(rows[i] == -7.0f);
  }
}

TEST_CASE("row2im is the adjoint of im2row and agrees with col2im", "[kernels][conv]") {
  Rng rng(6);
  for (const auto& g : kGeometries) {
    const std::size_t image_size = static_cast<std::size_t>(g.channels) * g.height * g.width;
    const int rows_n = g.col_rows(), pixels = g.col_cols();
    const auto r = random_vector(static_cast<std::size_t>(rows_n) * pixels, rng);
    // The column matrix is the transpose of the pixel-row matrix, so col2im of it must
    // give the same image up to summation order (float, a handful of terms: 1e-5).
    std::vector<float> columns(r.size());
    for (int p = 0; p < pixels; ++p)
      for (int k = 0; k < rows_n; ++k)
        columns[static_cast<std::size_t>(k) * pixels + p] = r[static_cast<std::size_t>(p) * rows_n + k];
    std::vector<float> from_rows(image_size, 99.0f), from_columns(image_size, 99.0f);
    cpu::row2im(g, r.data(), from_rows.data());
    cpu::col2im(g, columns.data(), 0, from_columns.data());
    for (std::size_t i = 0; i < image_size; ++i)
      REQUIRE(from_rows[i] == Approx(from_columns[i]).margin(1e-5));
    // Adjoint: <im2row(x), r> == <x, row2im(r)>, accumulated in double.
    const auto x = random_vector(image_size, rng);
    std::vector<float> rx(r.size());
    cpu::im2row(g, x.data(), rx.data());
    double lhs = 0, rhs = 0;
    for (std::size_t i = 0; i < r.size(); ++i) lhs += static_cast<double>(rx[i]) * r[i];
    for (std::size_t i = 0; i < image_size; ++i) rhs += static_cast<double>(x[i]) * from_rows[i];
    REQUIRE(lhs == Approx(rhs).epsilon(1e-5));
  }
}

TEST_CASE("small_gemm matches a double reference for every stride form and tail", "[kernels][gemm]") {
  Rng rng(7);
  struct Case {
    int m, n, k;
  };
  // LeNet's three products, row counts that split unevenly, every N tail (1..33), K
  // across the 64-wide K blocks, and empty edges.
  const Case cases[] = {{50, 81, 500}, {50, 500, 81}, {81, 500, 50}, {1, 1, 1}, {13, 17, 3}, {25, 33, 65},
                        {12, 16, 64},  {7, 31, 129},  {30, 1, 7},    {0, 5, 5}, {5, 0, 5},   {4, 9, 0}};
  for (const auto& c : cases) {
    for (bool transposed : {false, true}) {
      for (bool accumulate : {false, true}) {
        // A stored row-major [m x k] (a_row = k + 3, a_col = 1) or as its transpose
        // [k x m] (a_row = 1, a_col = m + 2); padded strides catch stride mix-ups.
        const long a_row = transposed ? 1 : c.k + 3, a_col = transposed ? c.m + 2 : 1;
        const long ldb = c.n + 5, ldc = c.n + 1;
        const auto a =
            random_vector(static_cast<std::size_t>(transposed ? c.k * a_col : c.m * a_row) + 1, rng);
        const auto b = random_vector(static_cast<std::size_t>(c.k) * ldb + 1, rng);
        auto out = random_vector(static_cast<std::size_t>(c.m) * ldc + 1, rng);
        const auto before = out;
        cpu::small_gemm(c.m, c.n, c.k, a.data(), a_row, a_col, b.data(), ldb, out.data(), ldc, accumulate);
        for (int i = 0; i < c.m; ++i) {
          for (int j = 0; j < ldc; ++j) {
            const std::size_t at = static_cast<std::size_t>(i) * ldc + j;
            if (j >= c.n) {  // padding between rows is never touched
              REQUIRE(out[at] == before[at]);
              continue;
            }
            double expect = accumulate ? before[at] : 0.0;
            double magnitude = std::fabs(expect);
            for (int p = 0; p < c.k; ++p) {
              const double term =
                  static_cast<double>(a[i * a_row + p * a_col]) * b[static_cast<std::size_t>(p) * ldb + j];
              expect += term;
              magnitude += std::fabs(term);
            }
            // fp32 accumulation of k products: error grows like k * eps * sum|terms|.
            REQUIRE(std::fabs(out[at] - expect) <= 1e-6 * (c.k + 1) * magnitude + 1e-30);
          }
        }
      }
    }
  }
}

TEST_CASE("Winograd F(3x3,5x5) and F(4x4,3x3) convolutions and their gradients match double references",
          "[kernels][conv]") {
  // Batch 3 of LeNet's second convolution (20 -> 50 channels, 13x13 -> 9x9), a padded
  // one whose outputs leave partial tiles, and 3x3 ones: ResNet-20's 16 channels on 14x14
  // (padding 1, partial 4x4 blocks, two tile groups) and 9 -> 5 on 7x9 without padding;
  // forward, input gradient and weight gradient through the Conv2d layer against direct
  // sums in double.
  struct Case {
    int c, h, w, k, pad, r;
  };
  for (const Case& cs : {Case{20, 13, 13, 50, 0, 5}, Case{6, 11, 8, 7, 2, 5}, Case{16, 14, 14, 16, 1, 3},
                         Case{9, 7, 9, 5, 0, 3}}) {
    const int r = cs.r;
    const cpu::ConvGeometry g{cs.c, cs.h, cs.w, r, r, 1, cs.pad};
    INFO("C=" << cs.c << " " << cs.h << "x" << cs.w << " K=" << cs.k << " padding " << cs.pad << " kernel "
              << r);
    REQUIRE(cpu::winograd_applies(g));
    const int n = 3, oh = g.out_h(), ow = g.out_w();
    Rng rng(77);
    Conv2d layer(cs.c, cs.k, r, 1, cs.pad);
    std::vector<float> params = random_vector(static_cast<std::size_t>(layer.param_count()), rng),
                       grads(params.size());
    layer.bind(params.data(), 0);
    const Shape in{n, cs.c, cs.h, cs.w}, out = layer.output_shape(in);
    const std::vector<float> x = random_vector(static_cast<std::size_t>(in.numel()), rng);
    std::vector<float> dy = random_vector(static_cast<std::size_t>(out.numel()), rng);
    const std::vector<float> dy_copy = dy;
    std::vector<float> y(static_cast<std::size_t>(out.numel())), dx(x.size());
    std::vector<float> scratch(static_cast<std::size_t>(layer.scratch_floats(in)));
    layer.forward(ConstTensorView{x.data(), in}, TensorView{y.data(), out}, scratch.data(), Pass::train);
    layer.backward(ConstTensorView{x.data(), in}, ConstTensorView{y.data(), out}, TensorView{dy.data(), out},
                   dx.data(), grads.data(), scratch.data());

    const long plane = static_cast<long>(cs.h) * cs.w, out_plane = static_cast<long>(oh) * ow;
    auto w_at = [&](int k, int c, int a, int b) {
      return params[((static_cast<std::size_t>(k) * cs.c + c) * r + a) * r + b];
    };
    auto x_at = [&](int img, int c, int iy, int ix) -> double {
      if (iy < 0 || iy >= cs.h || ix < 0 || ix >= cs.w) return 0.0;
      return x[static_cast<std::size_t>(img * cs.c * plane + c * plane + iy * cs.w + ix)];
    };
    std::vector<double> y_ref(y.size()), dx_ref(x.size(), 0.0),
        dw_ref(static_cast<std::size_t>(cs.k) * cs.c * r * r, 0.0);
    for (int img = 0; img < n; ++img)
      for (int k = 0; k < cs.k; ++k)
        for (int oy = 0; oy < oh; ++oy)
          for (int ox = 0; ox < ow; ++ox) {
            const std::size_t o =
                static_cast<std::size_t>(img * cs.k * out_plane + k * out_plane + oy * ow + ox);
            double sum = params[static_cast<std::size_t>(cs.k * cs.c * r * r + k)];
            for (int c = 0; c < cs.c; ++c)
              for (int a = 0; a < r; ++a)
                for (int b = 0; b < r; ++b) {
                  const int iy = oy + a - cs.pad, ix = ox + b - cs.pad;
                  sum += w_at(k, c, a, b) * x_at(img, c, iy, ix);
                  dw_ref[((static_cast<std::size_t>(k) * cs.c + c) * r + a) * r + b] +=
                      dy_copy[o] * x_at(img, c, iy, ix);
                  if (iy >= 0 && iy < cs.h && ix >= 0 && ix < cs.w)
                    dx_ref[static_cast<std::size_t>(img * cs.c * plane + c * plane + iy * cs.w + ix)] +=
                        dy_copy[o] * w_at(k, c, a, b);
                }
            y_ref[o] = sum;
          }
    // Each result sums up to 500 (forward, dx) or 3 x 81 (dW) products of N(0,1)
    // values, so entries reach ~100. Direct fp32 summation would be within ~1e-6 of the
    // largest entry; Winograd's transforms scale by up to 8 and divide by up to 20
    // (points 0, +-1, +-2, -1/2, infinity), which measured 3-6e-6 of it here. 5e-5 leaves
    // a tenfold margin, while an index or coefficient error gives errors of the size of
    // the entries themselves.
    auto check = [](const char* what, const float* got, const std::vector<double>& want) {
      double scale = 0.0, worst = 0.0;
      for (double v : want) scale = std::max(scale, std::abs(v));
      for (std::size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
      INFO(what << ": largest entry " << scale << ", largest error " << worst);
      REQUIRE(scale > 1.0);
      REQUIRE(worst <= 5e-5 * scale);
    };
    check("forward", y.data(), y_ref);
    check("input gradient", dx.data(), dx_ref);
    check("weight gradient", grads.data(), dw_ref);
  }
}
