// The arithmetic of the cuBLAS and cuDNN calls (kernels/cuda/{gemm,conv}_layout.hpp),
// proven without a device: a GemmCall is executed the way cuBLAS defines a column-major
// sgemm, on our row-major buffers, and compared with row-major loops and the CPU layers;
// the convolution descriptors are compared with the CPU Conv2d's shapes and indexing.
// Plain C++: built with or without the CUDA backend.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <vector>

#include "base/rng.hpp"
#include "kernels/cpu/conv.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cuda/conv_layout.hpp"
#include "kernels/cuda/gemm_layout.hpp"
#include "model/flat_buffer.hpp"
#include "model/layers/conv2d.hpp"
#include "model/layers/linear.hpp"

using namespace hearsay;
using cuda::GemmCall;

namespace {

// cublasSgemm's definition, column-major: element (i, j) of a matrix with leading
// dimension ld is at [i + j * ld]; C = alpha * op(A) op(B) + beta * C, C not read when
// beta is 0. Sums in double so that the comparison below can be exact.
void column_major_sgemm(const GemmCall& c, float alpha, const float* a, const float* b, float beta,
                        float* out) {
  auto op_a = [&](int i, int p) {
    return c.trans_a ? a[p + std::size_t(i) * c.lda] : a[i + std::size_t(p) * c.lda];
  };
  auto op_b = [&](int p, int j) {
    return c.trans_b ? b[j + std::size_t(p) * c.ldb] : b[p + std::size_t(j) * c.ldb];
  };
  for (int j = 0; j < c.n; ++j)
    for (int i = 0; i < c.m; ++i) {
      double s = 0;
      for (int p = 0; p < c.k; ++p) s += double(op_a(i, p)) * double(op_b(p, j));
      float& dst = out[i + std::size_t(j) * c.ldc];
      dst = static_cast<float>(alpha * s + (beta == 0.0f ? 0.0 : double(beta) * dst));
    }
}

// The same product written row-major from cpu::sgemm's definition, with the same sums.
void row_major_sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                     const float* b, int ldb, float beta, float* out, int ldc) {
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int p = 0; p < k; ++p) {
        const float av = trans_a ? a[std::size_t(p) * lda + i] : a[std::size_t(i) * lda + p];
        const float bv = trans_b ? b[std::size_t(j) * ldb + p] : b[std::size_t(p) * ldb + j];
        s += double(av) * double(bv);
      }
      float& dst = out[std::size_t(i) * ldc + j];
      dst = static_cast<float>(alpha * s + (beta == 0.0f ? 0.0 : double(beta) * dst));
    }
}

// Executes `call` on row-major A and B the way the library passes them to cuBLAS.
void run(const GemmCall& call, float alpha, const float* a, const float* b, float beta, float* out) {
  const auto [first, second] = cuda::cublas_operands(call, a, b);
  column_major_sgemm(call, alpha, first, second, beta, out);
}

std::vector<float> random_vector(std::size_t n, Rng& rng) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.normal());
  return v;
}

// |got - want| <= rel * (|want| + 1): the products below sum at most a few hundred O(1)
// terms in fp32 (OpenBLAS) against double sums; 1e-5 leaves a wide margin over that
// rounding while a wrong index gives O(1) errors.
void check_close(const std::vector<float>& got, const std::vector<float>& want, double rel = 1e-5) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    REQUIRE(std::fabs(double(got[i]) - double(want[i])) <= rel * (std::fabs(double(want[i])) + 1.0));
  }
}

}  // namespace

TEST_CASE("GemmCall runs a row-major product as cuBLAS's column-major one", "[cuda_layout]") {
  Rng rng(2024);
  const int sizes[] = {1, 2, 3, 7, 16, 33};
  const float kGuard = 1234.5f;  // the padding columns of C must keep it
  for (const bool ta : {false, true})
    for (const bool tb : {false, true})
      for (const int m : sizes)
        for (const int n : sizes)
          for (const int k : {1, 5, 17})
            for (const int pad : {0, 3}) {
              INFO("trans_a " << ta << " trans_b " << tb << " m " << m << " n " << n << " k " << k << " pad "
                              << pad);
              // Stored shapes (row-major, before op) with row strides padded by `pad`.
              const int a_rows = ta ? k : m, a_cols = ta ? m : k;
              const int b_rows = tb ? n : k, b_cols = tb ? k : n;
              const int lda = a_cols + pad, ldb = b_cols + pad, ldc = n + pad;
              const auto a = random_vector(std::size_t(a_rows) * lda, rng);
              const auto b = random_vector(std::size_t(b_rows) * ldb, rng);
              std::vector<float> c0(std::size_t(m) * ldc, kGuard);
              for (int i = 0; i < m; ++i)
                for (int j = 0; j < n; ++j) c0[std::size_t(i) * ldc + j] = static_cast<float>(rng.normal());
              for (const float beta : {0.0f, 0.5f}) {
                const float alpha = 1.5f;
                const GemmCall call = cuda::row_major_gemm_call(ta, tb, m, n, k, lda, ldb, ldc);
                std::vector<float> got = c0, want = c0, blas = c0;
                run(call, alpha, a.data(), b.data(), beta, got.data());
                row_major_sgemm(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, want.data(), ldc);
                // Same products summed in the same order: identical, padding included.
                REQUIRE(got == want);
                cpu::sgemm(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, blas.data(), ldc);
                check_close(got, blas);
              }
            }
}

TEST_CASE("GemmCall rejects what cuBLAS would reject", "[cuda_layout]") {
  CHECK_THROWS_AS(cuda::row_major_gemm_call(false, false, -1, 2, 2, 2, 2, 2), std::invalid_argument);
  // Row-major A[2 x 3] needs a row stride of at least 3.
  CHECK_THROWS_AS(cuda::row_major_gemm_call(false, false, 2, 4, 3, 2, 4, 4), std::invalid_argument);
  CHECK_THROWS_AS(cuda::row_major_gemm_call(false, false, 2, 4, 3, 3, 3, 4), std::invalid_argument);
  CHECK_THROWS_AS(cuda::row_major_gemm_call(false, false, 2, 4, 3, 3, 4, 3), std::invalid_argument);
  CHECK_NOTHROW(cuda::row_major_gemm_call(false, false, 2, 4, 3, 3, 4, 4));
  for (const auto& f :
       {cuda::linear_forward_call, cuda::linear_backward_data_call, cuda::linear_backward_weight_call}) {
    CHECK_THROWS_AS(f(0, 3, 4), std::invalid_argument);
    CHECK_THROWS_AS(f(2, 0, 4), std::invalid_argument);
    CHECK_THROWS_AS(f(2, 3, -1), std::invalid_argument);
  }
}

TEST_CASE("The Linear GemmCalls compute the CPU Linear layer's products", "[cuda_layout]") {
  Rng rng(77);
  struct Dims {
    int batch, in, out;
  };
  const Dims shapes[] = {{1, 1, 1}, {1, 5, 3},    {3, 13, 7},    {4, 1, 9},
                         {9, 8, 1}, {17, 33, 10}, {2, 800, 128}, {5, 128, 10}};
  for (const auto& [batch, in, out] : shapes) {
    INFO("batch " << batch << " in " << in << " out " << out);
    Linear layer(in, out);
    FlatBuffer params(static_cast<std::size_t>(layer.param_count())), grads(params.size());
    layer.bind(params.data(), 0);
    for (auto& v : params.span()) v = static_cast<float>(rng.normal());
    // The GPU adds the bias separately; zero it so the layer computes the product alone.
    std::fill(params.data() + std::size_t(out) * in, params.data() + params.size(), 0.0f);
    const float* w = params.data();
    const auto x = random_vector(std::size_t(batch) * in, rng);
    const auto dy = random_vector(std::size_t(batch) * out, rng);

    std::vector<float> y_cpu(std::size_t(batch) * out), dx_cpu(x.size());
    const Shape in_shape{batch, in}, out_shape{batch, out};
    layer.forward(ConstTensorView{x.data(), in_shape}, TensorView{y_cpu.data(), out_shape}, nullptr, Pass::train);
    std::vector<float> dy_cpu = dy;  // backward may overwrite dy
    layer.backward(ConstTensorView{x.data(), in_shape}, ConstTensorView{y_cpu.data(), out_shape},
                   TensorView{dy_cpu.data(), out_shape}, dx_cpu.data(), grads.data(), nullptr);
    const std::vector<float> dw_cpu(grads.data(), grads.data() + std::size_t(out) * in);

    std::vector<float> y(y_cpu.size(), -1.0f), dx(x.size(), -1.0f), dw(dw_cpu.size(), -1.0f);
    run(cuda::linear_forward_call(batch, in, out), 1.0f, x.data(), w, 0.0f, y.data());
    run(cuda::linear_backward_data_call(batch, in, out), 1.0f, dy.data(), w, 0.0f, dx.data());
    run(cuda::linear_backward_weight_call(batch, in, out), 1.0f, dy.data(), x.data(), 0.0f, dw.data());
    check_close(y, y_cpu);
    check_close(dx, dx_cpu);
    check_close(dw, dw_cpu);
  }
}

TEST_CASE("conv_descriptors matches the CPU Conv2d's shapes", "[cuda_layout]") {
  int checked = 0;
  for (const int kernel : {1, 3, 5})
    for (const int stride : {1, 2, 3})
      for (const int padding : {0, 1, 2})
        for (const int h : {1, 4, 5, 7, 13, 28})
          for (const int w : {1, 6, 9, 26}) {
            const int channels = 1 + (h + w) % 4, out_ch = 1 + (kernel * stride) % 5, batch = 1 + h % 3;
            const cpu::ConvGeometry g{channels, h, w, kernel, kernel, stride, padding};
            INFO("c " << channels << " h " << h << " w " << w << " k " << kernel << " s " << stride << " p "
                      << padding);
            if (h + 2 * padding < kernel || w + 2 * padding < kernel) {
              CHECK_THROWS_AS(cuda::conv_descriptors(g, batch, out_ch), std::invalid_argument);
              continue;
            }
            const cuda::ConvDescriptors d = cuda::conv_descriptors(g, batch, out_ch);
            const Shape out =
                Conv2d(channels, out_ch, kernel, stride, padding).output_shape(Shape{batch, channels, h, w});
            CHECK(Shape{d.out_n, d.out_c, d.out_h, d.out_w} == out);
            CHECK(d.out_h == g.out_h());
            CHECK(d.out_w == g.out_w());
            CHECK(Shape{d.n, d.c, d.h, d.w} == Shape{batch, channels, h, w});
            CHECK(Shape{d.k, d.c, d.r, d.s} == Shape{out_ch, channels, kernel, kernel});
            CHECK((d.pad_h == padding && d.pad_w == padding && d.stride_h == stride && d.stride_w == stride));
            CHECK((d.dil_h == 1 && d.dil_w == 1));
            CHECK(d.x_elements() == Shape{batch, channels, h, w}.numel());
            CHECK(d.y_elements() == out.numel());
            CHECK(d.w_elements() == Shape{out_ch, channels, kernel, kernel}.numel());
            ++checked;
          }
  CHECK(checked > 300);
}

TEST_CASE("conv_descriptors' strides index NCHW row-major tensors", "[cuda_layout]") {
  const cpu::ConvGeometry g{3, 7, 5, 3, 3, 2, 1};
  const cuda::ConvDescriptors d = cuda::conv_descriptors(g, 2, 4);
  auto check_strides = [](const int(&s)[4], int n, int c, int h, int w) {
    std::int64_t expected = 0;  // row-major order visits offsets 0, 1, 2, ...
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < c; ++j)
        for (int y = 0; y < h; ++y)
          for (int x = 0; x < w; ++x)
            REQUIRE(std::int64_t{i} * s[0] + std::int64_t{j} * s[1] + std::int64_t{y} * s[2] + x * s[3] ==
                    expected++);
  };
  check_strides(d.x_strides, d.n, d.c, d.h, d.w);
  check_strides(d.y_strides, d.out_n, d.out_c, d.out_h, d.out_w);
  CHECK(d.out_h == 4);  // 1 + (7 + 2 - 3) / 2
  CHECK(d.out_w == 3);  // 1 + (5 + 2 - 3) / 2
}

TEST_CASE("conv_descriptors rejects bad sizes", "[cuda_layout]") {
  const cpu::ConvGeometry ok{1, 5, 5, 3, 3, 1, 0};
  CHECK_NOTHROW(cuda::conv_descriptors(ok, 1, 1));
  CHECK_THROWS_AS(cuda::conv_descriptors(ok, 0, 1), std::invalid_argument);
  CHECK_THROWS_AS(cuda::conv_descriptors(ok, 1, 0), std::invalid_argument);
  auto with = [&](auto change) {
    cpu::ConvGeometry g = ok;
    change(g);
    return g;
  };
  CHECK_THROWS_AS(cuda::conv_descriptors(with([](auto& g) { g.channels = 0; }), 1, 1), std::invalid_argument);
  CHECK_THROWS_AS(cuda::conv_descriptors(with([](auto& g) { g.height = -1; }), 1, 1), std::invalid_argument);
  CHECK_THROWS_AS(cuda::conv_descriptors(with([](auto& g) { g.stride = 0; }), 1, 1), std::invalid_argument);
  CHECK_THROWS_AS(cuda::conv_descriptors(with([](auto& g) { g.padding = -1; }), 1, 1), std::invalid_argument);
  CHECK_THROWS_AS(cuda::conv_descriptors(with([](auto& g) { g.kernel_w = 6; }), 1, 1), std::invalid_argument);
  // A kernel larger than the input but not than the padded input is fine.
  CHECK_NOTHROW(cuda::conv_descriptors(with([](auto& g) {
                                         g.kernel_h = g.kernel_w = 7;
                                         g.padding = 1;
                                       }),
                                       1, 1));
  // More elements than cuDNN's int-sized descriptors hold.
  CHECK_THROWS_AS(cuda::conv_descriptors(cpu::ConvGeometry{64, 1024, 1024, 3, 3, 1, 1}, 64, 8),
                  std::invalid_argument);
}

TEST_CASE("conv_plan_key tells every shape apart", "[cuda_layout]") {
  const cpu::ConvGeometry g{3, 8, 9, 3, 3, 1, 1};
  const auto key = cuda::conv_plan_key(g, 4, 5);
  CHECK(key == cuda::conv_plan_key(g, 4, 5));
  CHECK(key != cuda::conv_plan_key(g, 3, 5));
  CHECK(key != cuda::conv_plan_key(g, 4, 6));
  for (int field = 0; field < 7; ++field) {
    cpu::ConvGeometry other = g;
    int* fields[] = {&other.channels, &other.height, &other.width,  &other.kernel_h,
                     &other.kernel_w, &other.stride, &other.padding};
    ++*fields[field];
    CHECK(key != cuda::conv_plan_key(other, 4, 5));
  }
}
