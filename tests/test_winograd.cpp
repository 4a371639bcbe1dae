// The Winograd transforms (kernels/cpu/winograd.hpp) one by one: a single tile against
// the direct sum, and each backward transform as the adjoint of its forward one,
// <T x, y> == <x, T^T y>, for F(3x3, 5x5), F(4x4, 3x3) and F(2x2, 3x3).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <vector>

#include "base/rng.hpp"
#include "kernels/cpu/winograd.hpp"

using namespace hearsay;

namespace {

struct Variant {
  int m, r;
};
const Variant kVariants[] = {{3, 5}, {4, 3}, {2, 3}};

std::vector<float> random_vector(std::size_t n, Rng& rng) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.normal());
  return v;
}

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// The tiles' columns [0, count) of a transformed tensor [P][rows][ld]; the rest zero.
std::vector<float> columns_only(std::vector<float> v, long ld, int count) {
  for (std::size_t i = 0; i < v.size(); ++i)
    if (static_cast<long>(i % static_cast<std::size_t>(ld)) >= count) v[i] = 0.0f;
  return v;
}

}  // namespace

TEST_CASE("Winograd transforms compute one tile's correlation", "[kernels][conv][winograd]") {
  for (const Variant& f : kVariants) {
    const int alpha = f.m + f.r - 1, p = alpha * alpha;
    const cpu::WinogradTiling tiling(cpu::ConvGeometry{1, alpha, alpha, f.r, f.r, 1, 0}, f.m);
    REQUIRE(tiling.tiles_per_image() == 1);
    Rng rng(91);
    std::vector<float> u(static_cast<std::size_t>(p)), v(u.size()), prod(u.size()),
        y(static_cast<std::size_t>(f.m * f.m));
    std::vector<double> errors;
    for (int trial = 0; trial < 20000; ++trial) {
      const auto w = random_vector(static_cast<std::size_t>(f.r * f.r), rng);
      const auto d = random_vector(static_cast<std::size_t>(p), rng);
      cpu::winograd_filter_transform(tiling, 1, w.data(), u.data());
      cpu::winograd_input_transform(tiling, d.data(), 0, 1, v.data(), 1);
      for (int xi = 0; xi < p; ++xi) prod[xi] = u[xi] * v[xi];
      cpu::winograd_output_transform(tiling, 1, prod.data(), 1, 0, 1, y.data());
      double largest = 0.0, worst = 0.0;
      for (int oy = 0; oy < f.m; ++oy)
        for (int ox = 0; ox < f.m; ++ox) {
          double sum = 0.0;
          for (int a = 0; a < f.r; ++a)
            for (int b = 0; b < f.r; ++b)
              sum += static_cast<double>(w[a * f.r + b]) * d[(oy + a) * alpha + ox + b];
          largest = std::max(largest, std::abs(sum));
          worst = std::max(worst, std::abs(y[oy * f.m + ox] - sum));
        }
      errors.push_back(worst / largest);
    }
    std::sort(errors.begin(), errors.end());
    const double median = errors[errors.size() / 2], worst = errors.back();
    INFO("F(" << f.m << "," << f.r << "): error relative to the tile's largest output: median " << median
              << ", worst " << worst);
    // Measured (fp32, AVX-512, median / worst): F(3,5) 1.1e-6 / 1.9e-5, F(4,3) 6.4e-7 /
    // 1.1e-5, F(2,3) 1e-7 / 1.9e-6. A wrong coefficient gives errors of order one.
    CHECK(median < 5e-6);
    CHECK(worst < 5e-5);
  }
}

TEST_CASE("Winograd backward transforms are the adjoints of the forward ones", "[kernels][conv][winograd]") {
  for (const Variant& f : kVariants) {
    // Two images whose outputs leave partial blocks at the right and bottom edges, read
    // through padding, in calls of 17 tiles (a full and a partial 16-lane block) and a rest.
    const int pad = f.r / 2, channels = 3, out_channels = 2, images = 2;
    const cpu::WinogradTiling tiling(cpu::ConvGeometry{channels, 6 * f.m + 1, 4 * f.m + 2, f.r, f.r, 1, pad},
                                     f.m);
    const long tiles = images * tiling.tiles_per_image(), ld = 20;
    const int p = tiling.positions();
    REQUIRE(tiles > 2 * 17);
    INFO("F(" << f.m << "," << f.r << "), " << tiles << " tiles");
    Rng rng(93);
    const cpu::ConvGeometry& g = tiling.g;
    const std::size_t image_floats = static_cast<std::size_t>(images) * channels * g.height * g.width;
    const std::size_t out_floats = static_cast<std::size_t>(images) * out_channels * g.out_h() * g.out_w();
    const std::vector<float> x = random_vector(image_floats, rng), dy = random_vector(out_floats, rng);
    std::vector<float> dx(image_floats, 0.0f), y(out_floats, 0.0f);
    double input_lhs = 0.0, output_lhs = 0.0, rhs_m = 0.0;
    for (long t0 = 0; t0 < tiles; t0 += 17) {
      const int count = static_cast<int>(std::min(17L, tiles - t0));
      std::vector<float> v(static_cast<std::size_t>(p) * channels * ld);
      std::vector<float> dyt(static_cast<std::size_t>(p) * out_channels * ld);
      const auto dv = columns_only(random_vector(v.size(), rng), ld, count);
      const auto m = columns_only(random_vector(dyt.size(), rng), ld, count);
      cpu::winograd_input_transform(tiling, x.data(), t0, count, v.data(), ld);
      cpu::winograd_input_grad(tiling, dv.data(), ld, t0, count, dx.data());
      input_lhs += dot(v, dv);
      cpu::winograd_output_transform(tiling, out_channels, m.data(), ld, t0, count, y.data());
      cpu::winograd_output_grad(tiling, out_channels, dy.data(), t0, count, dyt.data(), ld);
      rhs_m += dot(m, columns_only(dyt, ld, count));
    }
    output_lhs = dot(y, dy);
    CHECK(input_lhs == Approx(dot(x, dx)).epsilon(1e-5));
    CHECK(output_lhs == Approx(rhs_m).epsilon(1e-5));

    // Filters: U [P][K][C] from w [K][C][r][r]; the gradient reads dU as [P][C][K].
    const auto w = random_vector(static_cast<std::size_t>(out_channels) * channels * f.r * f.r, rng);
    const auto du = random_vector(static_cast<std::size_t>(p) * out_channels * channels, rng);
    std::vector<float> u(du.size()), dw(w.size()), du_by_k(du.size());
    cpu::winograd_filter_transform(tiling, out_channels, w.data(), u.data());
    cpu::winograd_filter_grad(tiling, out_channels, du.data(), dw.data());
    for (int xi = 0; xi < p; ++xi)
      for (int c = 0; c < channels; ++c)
        for (int k = 0; k < out_channels; ++k)
          du_by_k[(static_cast<std::size_t>(xi) * out_channels + k) * channels + c] =
              du[(static_cast<std::size_t>(xi) * channels + c) * out_channels + k];
    CHECK(dot(u, du_by_k) == Approx(dot(w, dw)).epsilon(1e-5));
  }
}
