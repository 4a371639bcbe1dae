#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/vector.hpp"
#include "model/rng.hpp"

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
