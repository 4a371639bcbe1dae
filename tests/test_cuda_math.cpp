// The per-element functions of the CUDA activation and pooling kernels
// (kernels/cuda/math), run on the CPU over every output index and compared with
// kernels/cpu. No GPU needed: these run in every build, with or without CUDA.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/pool.hpp"
#include "kernels/cuda/math/activation_math.hpp"
#include "kernels/cuda/math/pool_math.hpp"
#include "tests/cuda_math_test_util.hpp"

using namespace hearsay;
using namespace hearsay::cuda_math_test;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Activations of every sign, zeros of both signs and non-finite values.
std::vector<float> activation_values(std::size_t n, std::uint64_t seed) {
  std::vector<float> v = normals(n, seed);
  const float specials[] = {0.0f, -0.0f, kNaN, kInf, -kInf, 1e-40f, -1e-40f};
  for (std::size_t i = 0; i < n; i += 5) v[i] = specials[(i / 5) % std::size(specials)];
  return v;
}

struct RowShape {
  long batch;
  int channels;
  long pixels;
};
// Batch 1, odd sizes, a single pixel (a conv output of 1x1), LeNet's conv outputs.
const RowShape kRowShapes[] = {{1, 1, 1},   {1, 3, 7}, {2, 5, 13}, {3, 16, 64},
                               {4, 6, 676}, {2, 7, 1}, {5, 1, 517}};

struct ColShape {
  long batch;
  int features;
};
// Batch 1, odd sizes, features past one 32-wide tile, more rows than the kernel's lanes.
const ColShape kColShapes[] = {{1, 1}, {1, 10}, {3, 7}, {17, 120}, {64, 84}, {100, 33}};

}  // namespace

TEST_CASE("relu and relu_grad match cpu::relu_forward and relu_backward bit for bit", "[cuda_math]") {
  for (const std::size_t n : {std::size_t{1}, std::size_t{3}, std::size_t{17}, std::size_t{1030}}) {
    const std::vector<float> x = activation_values(n, 11 + n), dy = normals(n, 12 + n);
    for (std::size_t phase = 0; phase < 4; ++phase) {
      INFO("n=" << n << " phase=" << phase);
      Phased<float> px(x, phase), pdy(dy, phase);
      std::vector<float> got(n), got_dx(n), want(n), want_dx(n);
      for (std::size_t i = 0; i < n; ++i) got[i] = cuda::relu(px.data()[i]);
      for (std::size_t i = 0; i < n; ++i) got_dx[i] = cuda::relu_grad(px.data()[i], pdy.data()[i]);
      cpu::relu_forward(static_cast<long>(n), x.data(), want.data());
      cpu::relu_backward(static_cast<long>(n), x.data(), dy.data(), want_dx.data());
      CHECK(differences(got, want, same_bits) == "");
      CHECK(differences(got_dx, want_dx, same_bits) == "");
    }
  }
}

TEST_CASE("bias_act over NCHW rows matches cpu::bias_rows image by image", "[cuda_math]") {
  for (const RowShape& s : kRowShapes) {
    const std::size_t total = static_cast<std::size_t>(s.batch) * s.channels * s.pixels;
    const std::vector<float> y = activation_values(total, total), bias = normals(s.channels, 7);
    for (const bool relu : {false, true}) {
      for (std::size_t phase = 0; phase < 4; ++phase) {
        INFO("batch=" << s.batch << " channels=" << s.channels << " pixels=" << s.pixels << " relu=" << relu
                      << " phase=" << phase);
        Phased<float> py(y, phase);
        // The kernel's loop body with its 32-bit and 64-bit index types.
        std::vector<float> got32(total), got64(total);
        for (std::uint32_t e = 0; e < total; ++e) {
          const auto c = cuda::channel_of<std::uint32_t>(e, static_cast<std::uint32_t>(s.pixels),
                                                         static_cast<std::uint32_t>(s.channels));
          got32[e] = cuda::bias_act(py.data()[e], bias[c], relu);
        }
        for (std::uint64_t e = 0; e < total; ++e) {
          const auto c = cuda::channel_of<std::uint64_t>(e, static_cast<std::uint64_t>(s.pixels),
                                                         static_cast<std::uint64_t>(s.channels));
          got64[e] = cuda::bias_act(py.data()[e], bias[c], relu);
        }
        std::vector<float> want = y;
        const std::size_t image = static_cast<std::size_t>(s.channels) * s.pixels;
        for (long n = 0; n < s.batch; ++n)
          cpu::bias_rows(s.channels, s.pixels, bias.data(), relu, want.data() + n * image);
        CHECK(differences(got32, want, same_bits) == "");
        CHECK(differences(got64, want, same_bits) == "");
      }
    }
  }
}

TEST_CASE("bias_act over feature columns matches cpu::bias_cols", "[cuda_math]") {
  for (const auto [batch, features] : kColShapes) {
    const std::size_t total = static_cast<std::size_t>(batch) * features;
    const std::vector<float> y = activation_values(total, 3 + total), bias = normals(features, 5);
    for (const bool relu : {false, true}) {
      for (std::size_t phase = 0; phase < 4; ++phase) {
        INFO("batch=" << batch << " features=" << features << " relu=" << relu << " phase=" << phase);
        Phased<float> py(y, phase);
        std::vector<float> got(total);
        for (std::uint32_t e = 0; e < total; ++e)
          got[e] = cuda::bias_act(py.data()[e], bias[e % static_cast<std::uint32_t>(features)], relu);
        std::vector<float> want = y;
        cpu::bias_cols(batch, features, bias.data(), relu, want.data());
        CHECK(differences(got, want, same_bits) == "");
      }
    }
  }
}

namespace {

// db as bias_grad_rows_kernel computes it: kLanes strided partial sums, then the tree.
constexpr unsigned kRowsLanes = 512;  // the kernel's block size
std::vector<float> device_order_bias_grad_rows(const RowShape& s, const float* dy) {
  std::vector<float> db(s.channels);
  std::vector<float> part(kRowsLanes);
  for (int c = 0; c < s.channels; ++c) {
    for (unsigned t = 0; t < kRowsLanes; ++t)
      part[t] = cuda::bias_rows_partial(dy, s.batch, s.channels, s.pixels, c, t, kRowsLanes);
    db[c] = cuda::tree_reduce(part.data(), kRowsLanes);
  }
  return db;
}

std::vector<float> cpu_bias_grad_rows(const RowShape& s, const float* dy) {
  std::vector<float> db(s.channels, 0.0f);
  const long image = static_cast<long>(s.channels) * s.pixels;
  for (long n = 0; n < s.batch; ++n)
    cpu::bias_grad_rows(s.channels, s.pixels, dy + n * image, n > 0, db.data());
  return db;
}

constexpr unsigned kColLanes = 32;  // bias_grad_cols_kernel's row lanes
std::vector<float> device_order_bias_grad_cols(long batch, int features, const float* dy) {
  std::vector<float> db(features), part(kColLanes);
  for (int f = 0; f < features; ++f) {
    for (unsigned t = 0; t < kColLanes; ++t)
      part[t] = cuda::bias_cols_partial(dy, batch, features, f, t, kColLanes);
    db[f] = cuda::tree_reduce(part.data(), kColLanes);
  }
  return db;
}

}  // namespace

TEST_CASE("bias gradients in the device's summation order match kernels/cpu", "[cuda_math]") {
  // Whole numbers: every order of summation is exact, so the device order must give
  // kernels/cpu's result exactly, and any element summed twice or missed shows.
  for (const RowShape& s : kRowShapes) {
    const std::size_t total = static_cast<std::size_t>(s.batch) * s.channels * s.pixels;
    const std::vector<float> dy = whole_numbers(total, 100 + total, -1000, 1000);
    for (std::size_t phase = 0; phase < 4; ++phase) {
      INFO("rows: batch=" << s.batch << " channels=" << s.channels << " pixels=" << s.pixels
                          << " phase=" << phase);
      Phased<float> p(dy, phase);
      CHECK(differences(device_order_bias_grad_rows(s, p.data()), cpu_bias_grad_rows(s, dy.data()),
                        same_bits) == "");
    }
  }
  for (const auto [batch, features] : kColShapes) {
    const std::vector<float> dy = whole_numbers(static_cast<std::size_t>(batch) * features, 7, -1000, 1000);
    for (std::size_t phase = 0; phase < 4; ++phase) {
      INFO("cols: batch=" << batch << " features=" << features << " phase=" << phase);
      Phased<float> p(dy, phase);
      std::vector<float> want(features);
      cpu::bias_grad_cols(batch, features, dy.data(), want.data());
      CHECK(differences(device_order_bias_grad_cols(batch, features, p.data()), want, same_bits) == "");
    }
  }
}

TEST_CASE("bias gradients of real-valued data are within the summation-order bound", "[cuda_math]") {
  // Any order of summing m terms errs by at most (m - 1) * 2^-24 * sum|x| (first order).
  // The device sums at most ceil(count / lanes) terms per lane and then log2(lanes)
  // levels; kernels/cpu at most count terms. The two can differ by the sum of both
  // bounds, which is still far below a missing element (|x| ~ 1 here).
  const double u = std::ldexp(1.0, -24);
  for (const RowShape& s : kRowShapes) {
    const std::size_t total = static_cast<std::size_t>(s.batch) * s.channels * s.pixels;
    const std::vector<float> dy = normals(total, 200 + total);
    const std::vector<float> got = device_order_bias_grad_rows(s, dy.data());
    const std::vector<float> want = cpu_bias_grad_rows(s, dy.data());
    const long count = s.batch * s.pixels;
    const double terms = static_cast<double>((count + kRowsLanes - 1) / kRowsLanes + 9 + count);
    for (int c = 0; c < s.channels; ++c) {
      double abs_sum = 0.0;
      for (long n = 0; n < s.batch; ++n)
        for (long p = 0; p < s.pixels; ++p) abs_sum += std::fabs(dy[(n * s.channels + c) * s.pixels + p]);
      INFO("batch=" << s.batch << " channels=" << s.channels << " pixels=" << s.pixels << " c=" << c);
      CHECK(std::fabs(double(got[c]) - double(want[c])) <= terms * u * abs_sum);
    }
  }
}

namespace {

struct PoolCase {
  int height, width, kernel, stride;
};
// Odd sizes with tails past the last window, stride below / equal to / above the kernel,
// a window as large as the plane, LeNet's 2x2 pools (which kernels/cpu runs with AVX-512
// where it can) and a width past that fast path's 32.
const PoolCase kPoolCases[] = {{1, 1, 1, 1},   {5, 7, 2, 2}, {28, 28, 2, 2}, {26, 26, 2, 2}, {9, 9, 2, 2},
                               {7, 9, 3, 1},   {8, 8, 2, 1}, {10, 11, 3, 3}, {13, 12, 2, 3}, {6, 5, 3, 2},
                               {33, 34, 2, 2}, {5, 5, 5, 1}, {4, 11, 1, 2}};

cpu::PoolGeometry geometry(const PoolCase& c) {
  return cpu::PoolGeometry{c.height, c.width, c.kernel, c.stride};
}

// Values with many ties (halves in [-4, 4]) and a few NaN, so the first-maximum rule and
// NaN propagation are exercised.
std::vector<float> tied_values(std::size_t n, std::uint64_t seed) {
  std::vector<float> v = normals(n, seed, 2.0f);
  for (auto& x : v) x = std::round(x * 2.0f) / 2.0f;
  for (std::size_t i = 37; i < n; i += 101) v[i] = kNaN;
  return v;
}

// Runs f(plane, row, col) over every element of `planes` planes of rows x cols.
template <class F>
std::vector<float> sweep(long planes, int rows, int cols, F f) {
  std::vector<float> out;
  for (long p = 0; p < planes; ++p)
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) out.push_back(f(p, r, c));
  return out;
}

}  // namespace

TEST_CASE("pool geometry and window ranges agree with cpu::PoolGeometry", "[cuda_math]") {
  for (const PoolCase& pc : kPoolCases) {
    const cuda::PoolDims d = cuda::pool_dims(pc.height, pc.width, pc.kernel, pc.stride);
    CHECK(d.out_h == geometry(pc).out_h());
    CHECK(d.out_w == geometry(pc).out_w());
    // windows_covering against a brute-force scan of all windows.
    for (int i = 0; i < pc.height; ++i) {
      const cuda::WindowRange r = cuda::windows_covering(i, pc.kernel, pc.stride, d.out_h);
      for (int o = 0; o < d.out_h; ++o) {
        const bool covers = o * pc.stride <= i && i < o * pc.stride + pc.kernel;
        INFO("height=" << pc.height << " k=" << pc.kernel << " s=" << pc.stride << " i=" << i << " o=" << o);
        CHECK(covers == (r.first <= o && o <= r.last));
      }
    }
  }
}

TEST_CASE("avgpool per-element functions match cpu::avgpool_forward and backward", "[cuda_math]") {
  for (const PoolCase& pc : kPoolCases) {
    const cpu::PoolGeometry g = geometry(pc);
    const cuda::PoolDims d = cuda::pool_dims(pc.height, pc.width, pc.kernel, pc.stride);
    const long in_plane = long{pc.height} * pc.width, out_plane = long{d.out_h} * d.out_w;
    // kernels/cpu's AVX-512 path for 2x2/2 adds a window's four values column pair first,
    // ((a + c) + (b + d)) instead of ((a + b) + c) + d: two orders of four terms, each within
    // 3 roundings of the exact sum, so at most 6 * 2^-24 * sum|window| apart before the
    // exact scaling by 1/4. Everywhere else the order is the same and results are equal.
    const bool reordered = pc.kernel == 2 && pc.stride == 2 && pc.width <= 32 && cpu::has_avx512();
    for (const long planes : {1L, 3L}) {
      const std::vector<float> x = normals(planes * in_plane, 17 + planes),
                               dy = normals(planes * out_plane, 19);
      const std::vector<float> mask = normals(planes * in_plane, 23);
      for (std::size_t phase = 0; phase < 4; ++phase) {
        INFO(pc.height << "x" << pc.width << " k=" << pc.kernel << " s=" << pc.stride << " planes=" << planes
                       << " phase=" << phase);
        Phased<float> px(x, phase), pdy(dy, phase), pmask(mask, phase);
        const auto forward = sweep(planes, d.out_h, d.out_w, [&](long p, int r, int c) {
          return cuda::avgpool_forward_at(d, px.data() + p * in_plane, r, c);
        });
        std::vector<float> want(planes * out_plane);
        cpu::avgpool_forward(g, planes, x.data(), want.data());
        if (reordered) {
          for (std::size_t i = 0; i < want.size(); ++i) {
            const long p = static_cast<long>(i) / out_plane, r = (static_cast<long>(i) % out_plane) / d.out_w,
                       c = static_cast<long>(i) % d.out_w;
            const float* w = x.data() + p * in_plane + 2 * r * pc.width + 2 * c;
            const double window =
                std::fabs(w[0]) + std::fabs(w[1]) + std::fabs(w[pc.width]) + std::fabs(w[pc.width + 1]);
            CHECK(std::fabs(double(forward[i]) - want[i]) <= 6 * std::ldexp(1.0, -24) * window * 0.25);
          }
        } else {
          CHECK(differences(forward, want, same_value) == "");
        }
        for (const bool masked : {false, true}) {
          INFO("relu mask " << masked);
          const auto backward = sweep(planes, pc.height, pc.width, [&](long p, int r, int c) {
            return cuda::avgpool_backward_at(d, pdy.data() + p * out_plane,
                                             masked ? pmask.data() + p * in_plane : nullptr, r, c);
          });
          std::vector<float> want_dx(planes * in_plane, kNaN);  // overwritten everywhere
          cpu::avgpool_backward(g, planes, dy.data(), want_dx.data(), masked ? mask.data() : nullptr);
          CHECK(differences(backward, want_dx, same_value) == "");
        }
      }
    }
  }
}

TEST_CASE("maxpool per-element functions match cpu::maxpool_forward and backward", "[cuda_math]") {
  for (const PoolCase& pc : kPoolCases) {
    const cpu::PoolGeometry g = geometry(pc);
    const cuda::PoolDims d = cuda::pool_dims(pc.height, pc.width, pc.kernel, pc.stride);
    const long in_plane = long{pc.height} * pc.width, out_plane = long{d.out_h} * d.out_w;
    for (const long planes : {1L, 3L}) {
      const std::vector<float> x = tied_values(planes * in_plane, 29 + planes),
                               dy = normals(planes * out_plane, 31);
      for (std::size_t phase = 0; phase < 4; ++phase) {
        INFO(pc.height << "x" << pc.width << " k=" << pc.kernel << " s=" << pc.stride << " planes=" << planes
                       << " phase=" << phase);
        Phased<float> px(x, phase), pdy(dy, phase);
        const auto forward = sweep(planes, d.out_h, d.out_w, [&](long p, int r, int c) {
          return cuda::maxpool_forward_at(d, px.data() + p * in_plane, r, c);
        });
        std::vector<float> want(planes * out_plane);
        cpu::maxpool_forward(g, planes, x.data(), want.data());
        CHECK(differences(forward, want, same_bits) == "");
        const auto backward = sweep(planes, pc.height, pc.width, [&](long p, int r, int c) {
          return cuda::maxpool_backward_at(d, px.data() + p * in_plane, pdy.data() + p * out_plane, r, c);
        });
        std::vector<float> want_dx(planes * in_plane, kNaN);
        cpu::maxpool_backward(g, planes, x.data(), dy.data(), want_dx.data());
        CHECK(differences(backward, want_dx, same_value) == "");
      }
    }
  }
}
