#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "base/rng.hpp"
#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/vector.hpp"

using namespace hearsay;

TEST_CASE("axpby matches the scalar formula for every tail length", "[kernels][vector]") {
  Rng rng(1);
  for (std::size_t n : {0u, 1u, 7u, 15u, 16u, 17u, 1000u, 4097u}) {
    std::vector<float> x(n), y(n);
    for (auto& v : x) v = static_cast<float>(rng.normal());
    for (auto& v : y) v = static_cast<float>(rng.normal());
    auto expect = y;
    for (std::size_t i = 0; i < n; ++i) expect[i] = 0.25f * x[i] + 0.75f * y[i];
    cpu::axpby(n, 0.25f, x.data(), 0.75f, y.data());
    for (std::size_t i = 0; i < n; ++i) REQUIRE(y[i] == Approx(expect[i]).epsilon(1e-6));
  }
}

TEST_CASE("weighted_sum mixes k buffers and may write over an input", "[kernels][vector]") {
  Rng rng(2);
  const std::size_t n = 3000;
  std::vector<float> a(n), b(n), c(n);
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(rng.normal());
    b[i] = static_cast<float>(rng.normal());
    c[i] = static_cast<float>(rng.normal());
  }
  std::vector<float> expect(n);
  for (std::size_t i = 0; i < n; ++i) expect[i] = 0.5f * a[i] + 0.25f * b[i] + 0.25f * c[i];
  const float* xs[] = {a.data(), b.data(), c.data()};
  const float w[] = {0.5f, 0.25f, 0.25f};
  cpu::weighted_sum(n, 3, xs, w, a.data());  // alias the first input
  for (std::size_t i = 0; i < n; ++i) REQUIRE(a[i] == Approx(expect[i]).epsilon(1e-6));
}

TEST_CASE("all_finite spots NaN and Inf anywhere", "[kernels][vector]") {
  std::vector<float> x(100, 1.0f);
  REQUIRE(cpu::all_finite(x.size(), x.data()));
  x[57] = std::numeric_limits<float>::quiet_NaN();
  REQUIRE_FALSE(cpu::all_finite(x.size(), x.data()));
  x[57] = -std::numeric_limits<float>::infinity();
  REQUIRE_FALSE(cpu::all_finite(x.size(), x.data()));
  REQUIRE(cpu::all_finite(0, nullptr));
}

TEST_CASE("squared_distance and dot agree with double arithmetic", "[kernels][vector]") {
  std::vector<float> x{1, 2, 3}, y{1, 0, 5};
  REQUIRE(cpu::squared_distance(3, x.data(), y.data()) == 8.0);
  REQUIRE(cpu::dot(3, x.data(), y.data()) == 16.0);
}

TEST_CASE("squared_distance and dot match a serial double sum for every tail length", "[kernels][vector]") {
  // The kernels sum in lanes; a serial sum in long double is the reference. Relative
  // error bound: n double roundings of positive terms (squared_distance), or of terms of
  // either sign relative to the sum of magnitudes (dot), well under 1e-12 here.
  Rng rng(5);
  for (std::size_t n : {0u, 1u, 7u, 8u, 9u, 15u, 17u, 1000u, 129068u}) {
    std::vector<float> x(n), y(n);
    for (auto& v : x) v = static_cast<float>(rng.normal());
    for (auto& v : y) v = static_cast<float>(rng.normal());
    long double sd = 0, dot = 0, magnitude = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const long double d = static_cast<long double>(x[i]) - y[i];
      sd += d * d;
      dot += static_cast<long double>(x[i]) * y[i];
      magnitude += std::fabs(static_cast<long double>(x[i]) * y[i]);
    }
    INFO("n = " << n);
    CHECK(std::fabs(cpu::squared_distance(n, x.data(), y.data()) - static_cast<double>(sd)) <=
          1e-12 * static_cast<double>(sd));
    CHECK(std::fabs(cpu::dot(n, x.data(), y.data()) - static_cast<double>(dot)) <=
          1e-12 * static_cast<double>(magnitude));
  }
}

TEST_CASE("add_scaled_difference mixes like the scalar formula and returns the squared distance",
          "[kernels][vector]") {
  // Each element is computed in double exactly as the scalar formula, so the mixed values
  // are bit-identical; the returned sum is compared as the reductions above.
  Rng rng(6);
  for (std::size_t n : {0u, 1u, 7u, 8u, 9u, 1000u, 129068u}) {
    for (const bool from_is_x : {false, true}) {
      std::vector<float> x(n), to(n), from(n);
      for (auto& v : x) v = static_cast<float>(rng.normal());
      for (auto& v : to) v = static_cast<float>(rng.normal());
      for (auto& v : from) v = static_cast<float>(rng.normal());
      const float* f = from_is_x ? x.data() : from.data();
      std::vector<float> expect(n);
      long double sd = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const double d = static_cast<double>(to[i]) - static_cast<double>(f[i]);
        sd += static_cast<long double>(d) * d;
        expect[i] = static_cast<float>(static_cast<double>(x[i]) + 0.3 * d);
      }
      INFO("n = " << n << (from_is_x ? ", from aliases x" : ""));
      const double got = cpu::add_scaled_difference(n, x.data(), 0.3, to.data(), f);
      CHECK(std::fabs(got - static_cast<double>(sd)) <= 1e-12 * static_cast<double>(sd));
      CHECK(x == expect);
    }
  }
}

TEST_CASE("the vectorised clones are the ones the CPU can run", "[kernels][dispatch]") {
  // A resolver that tested CPU models rather than features once ran the baseline clone
  // on every AVX-512 machine but one model; this pins the choice to the features.
#if HEARSAY_HAVE_CLONES
  __builtin_cpu_init();
#if defined(__clang__)
  const bool wide = __builtin_cpu_supports("avx512f"), mid = __builtin_cpu_supports("avx2");
#else
  const bool wide = __builtin_cpu_supports("x86-64-v4"), mid = __builtin_cpu_supports("x86-64-v3");
#endif
  const std::string expect = wide ? "wide" : mid ? "mid" : "baseline";
  INFO("this CPU: " << cpu::simd_level());
  REQUIRE(std::string(cpu::clone_level()) == expect);
#else
  SUCCEED("built without clones (not x86-64, or HEARSAY_NO_CLONES): only the portable code exists");
  REQUIRE(std::string(cpu::clone_level()) == "baseline");
#endif
}

TEST_CASE("transpose moves every element for full blocks, edges and strides", "[kernels][vector]") {
  Rng rng(9);
  for (auto [rows, cols] : {std::pair{0, 5}, {1, 1}, {16, 16}, {50, 32}, {17, 33}, {3, 40}, {64, 48}}) {
    const long lds = cols + 3, ldd = rows + 5;  // padded rows on both sides
    std::vector<float> src(static_cast<std::size_t>(rows) * lds),
        dst(static_cast<std::size_t>(cols) * ldd, -7.0f);
    for (auto& v : src) v = static_cast<float>(rng.normal());
    cpu::transpose(rows, cols, src.data(), lds, dst.data(), ldd);
    INFO(rows << " x " << cols);
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j) REQUIRE(dst[j * ldd + i] == src[i * lds + j]);
    for (int j = 0; j < cols; ++j)  // the padding is left alone
      for (long i = rows; i < ldd; ++i) REQUIRE(dst[j * ldd + i] == -7.0f);
  }
}
