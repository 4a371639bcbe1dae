// cuda::axpby against cpu::axpby on a device: every length and alignment phase, aliasing.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <utility>
#include <vector>

#include "base/rng.hpp"
#include "kernels/cpu/vector.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/vector.hpp"

using namespace hearsay;

TEST_CASE("cuda::axpby matches cpu::axpby for every length and alignment", "[cuda][vector]") {
  INFO(cuda::describe_device(0));

  // Tolerance: the device compiles a*x + b*y as fma(a, x, b*y) (nvcc contracts by
  // default), the host may or may not contract, so the two can differ by one rounding of
  // a product: |gpu - cpu| <= 2^-24 * (|a*x| + |b*y|) and a little more. This is relative
  // to the size of the terms, not of the result, since a*x and b*y can cancel. 1e-6 is
  // ~16 ulps of headroom over that bound while still catching a wrong element or index.
  constexpr double kRelTol = 1e-6;
  constexpr float kGuard = -12345.0f;  // written around the range to catch out-of-bounds writes
  constexpr std::size_t kPad = 4;

  struct Layout {
    std::size_t x_off, y_off;
  };
  // (0,0): aligned float4 path; (1,1), (3,3): same phase, scalar head then float4;
  // (1,0), (0,2): different phase, scalar fallback.
  const Layout layouts[] = {{0, 0}, {1, 1}, {3, 3}, {1, 0}, {0, 2}};
  const std::pair<float, float> coeffs[] = {{0.5f, 0.5f}, {0.3f, 0.7f}, {-1.25f, 2.0f}};
  const std::size_t sizes[] = {0, 1, 3, 4, 5, 1023, std::size_t{1} << 20, (std::size_t{1} << 20) + 3};

  cuda::Stream stream;
  Rng rng(42);
  for (const std::size_t n : sizes) {
    std::vector<float> x(n), y(n);
    for (auto& v : x) v = static_cast<float>(rng.normal());
    for (auto& v : y) v = static_cast<float>(rng.normal());
    cuda::DeviceBuffer<float> dx(n + kPad), dy(n + kPad);
    std::vector<float> got(n + kPad);
    for (const Layout& L : layouts) {
      for (const auto& [a, b] : coeffs) {
        INFO("n=" << n << " x+" << L.x_off << " y+" << L.y_off << " a=" << a << " b=" << b);
        std::vector<float> padded_y(n + kPad, kGuard);
        std::copy(y.begin(), y.end(), padded_y.begin() + static_cast<std::ptrdiff_t>(L.y_off));
        dy.copy_from_host(padded_y);
        dx.copy_from_host(std::vector<float>(n + kPad, 0.0f));
        dx.copy_from_host(x, L.x_off);

        cuda::axpby(n, a, dx.data() + L.x_off, b, dy.data() + L.y_off, stream);
        stream.synchronize();
        dy.copy_to_host(got);

        std::vector<float> expect = y;
        cpu::axpby(n, a, x.data(), b, expect.data());

        std::size_t bad = 0, first_bad = n;
        double worst = 0.0;
        for (std::size_t i = 0; i < n; ++i) {
          const double scale = std::fabs(double(a) * x[i]) + std::fabs(double(b) * y[i]);
          const double diff = std::fabs(double(got[L.y_off + i]) - double(expect[i]));
          if (diff > kRelTol * scale) {
            if (bad++ == 0) first_bad = i;
          }
          if (scale > 0.0) worst = std::max(worst, diff / scale);
        }
        INFO("first bad index " << first_bad << ", worst relative error " << worst);
        CHECK(bad == 0);
        std::size_t guards_touched = 0;
        for (std::size_t i = 0; i < L.y_off; ++i) guards_touched += got[i] != kGuard;
        for (std::size_t i = L.y_off + n; i < n + kPad; ++i) guards_touched += got[i] != kGuard;
        CHECK(guards_touched == 0);
      }
    }
  }
}

TEST_CASE("cuda::axpby allows y to alias x", "[cuda][vector]") {
  const std::size_t n = 1027;
  std::vector<float> x(n);
  Rng rng(7);
  for (auto& v : x) v = static_cast<float>(rng.normal());
  for (const std::size_t off : {std::size_t{0}, std::size_t{1}}) {
    cuda::DeviceBuffer<float> d(n + 1);
    d.copy_from_host(x, off);
    cuda::axpby(n, 0.25f, d.data() + off, 0.5f, d.data() + off, nullptr);
    HEARSAY_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> got(n);
    d.copy_to_host(got, off);
    // 0.25*v + 0.5*v: both products are exact (powers of two), so the result is exact.
    for (std::size_t i = 0; i < n; ++i) REQUIRE(got[i] == 0.75f * x[i]);
  }
}
