#include "kernels/cpu/vector.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/dispatch.hpp"

namespace hearsay::cpu {

HEARSAY_CLONES void axpby(std::size_t n, float a, const float* x, float b, float* y) {
  for (std::size_t i = 0; i < n; ++i) y[i] = a * x[i] + b * y[i];
}

HEARSAY_CLONES void weighted_sum(std::size_t n, std::size_t k, const float* const* xs, const float* w,
                                 float* y) {
  if (k == 0) {
    fill(n, 0.0f, y);
    return;
  }
  // Blocked so that y is read and written once per block while staying in L1, and so
  // that y may alias one of the inputs (each block is read completely before written).
  constexpr std::size_t kBlock = 1024;
  float acc[kBlock];
  for (std::size_t start = 0; start < n; start += kBlock) {
    const std::size_t len = n - start < kBlock ? n - start : kBlock;
    const float w0 = w[0];
    const float* x0 = xs[0] + start;
    for (std::size_t i = 0; i < len; ++i) acc[i] = w0 * x0[i];
    for (std::size_t j = 1; j < k; ++j) {
      const float wj = w[j];
      const float* xj = xs[j] + start;
      for (std::size_t i = 0; i < len; ++i) acc[i] += wj * xj[i];
    }
    for (std::size_t i = 0; i < len; ++i) y[start + i] = acc[i];
  }
}

HEARSAY_CLONES void add(std::size_t n, const float* x, float* y) {
  for (std::size_t i = 0; i < n; ++i) y[i] += x[i];
}

HEARSAY_CLONES void scale(std::size_t n, float a, float* x) {
  for (std::size_t i = 0; i < n; ++i) x[i] *= a;
}

HEARSAY_CLONES void fill(std::size_t n, float value, float* x) {
  for (std::size_t i = 0; i < n; ++i) x[i] = value;
}

namespace {
typedef float Row16 __attribute__((vector_size(16 * sizeof(float))));
typedef int Index16 __attribute__((vector_size(16 * sizeof(int))));

// A 16x16 block transposed in registers by four perfect shuffles. Each one interleaves
// row i with row i + 8 into rows 2i and 2i + 1, which rotates the 8 bits of (row,
// column) left by one; after four rotations the row and column bits have traded places.
// Inlined into each clone of transpose(), so each gets its own vector code.
__attribute__((always_inline)) inline void transpose16_block(const float* src, long lds, float* dst,
                                                             long ldd) {
  constexpr Index16 lo = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23};
  constexpr Index16 hi = {8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  Row16 r[16], t[16];
  for (int i = 0; i < 16; ++i) std::memcpy(&r[i], src + i * lds, sizeof(Row16));
  for (int stage = 0; stage < 4; ++stage) {
    for (int i = 0; i < 8; ++i) {
      t[2 * i] = __builtin_shuffle(r[i], r[i + 8], lo);
      t[2 * i + 1] = __builtin_shuffle(r[i], r[i + 8], hi);
    }
    for (int i = 0; i < 16; ++i) r[i] = t[i];
  }
  for (int j = 0; j < 16; ++j) std::memcpy(dst + j * ldd, &r[j], sizeof(Row16));
}
}  // namespace

HEARSAY_CLONES void transpose(int rows, int cols, const float* src, long lds, float* dst, long ldd) {
  const int full_rows = rows / 16 * 16, full_cols = cols / 16 * 16;
  for (int i = 0; i < full_rows; i += 16)
    for (int j = 0; j < full_cols; j += 16) transpose16_block(src + i * lds + j, lds, dst + j * ldd + i, ldd);
  // The edges: columns past the last full block, then the rows past it.
  for (int i = 0; i < full_rows; ++i)
    for (int j = full_cols; j < cols; ++j) dst[j * ldd + i] = src[i * lds + j];
  for (int i = full_rows; i < rows; ++i)
    for (int j = 0; j < cols; ++j) dst[j * ldd + i] = src[i * lds + j];
}

namespace {
// Reductions keep kLanes independent partial sums: one serial chain of double adds is
// bound by the add latency (a quarter of an element per cycle), while independent lanes
// vectorise. The sums are rounded in a different order than a serial loop, by less than
// the double rounding of either.
constexpr std::size_t kLanes = 8;
}  // namespace

HEARSAY_CLONES double dot(std::size_t n, const float* x, const float* y) {
  double lane[kLanes] = {};
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (std::size_t k = 0; k < kLanes; ++k) lane[k] += static_cast<double>(x[i + k]) * y[i + k];
  double s = 0.0;
  for (const double l : lane) s += l;
  for (; i < n; ++i) s += static_cast<double>(x[i]) * y[i];
  return s;
}

HEARSAY_CLONES double squared_distance(std::size_t n, const float* x, const float* y) {
  double lane[kLanes] = {};
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (std::size_t k = 0; k < kLanes; ++k) {
      const double d = static_cast<double>(x[i + k]) - y[i + k];
      lane[k] += d * d;
    }
  double s = 0.0;
  for (const double l : lane) s += l;
  for (; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - y[i];
    s += d * d;
  }
  return s;
}

HEARSAY_CLONES double add_scaled_difference(std::size_t n, float* x, double alpha, const float* to,
                                            const float* from) {
  double lane[kLanes] = {};
  std::size_t i = 0;
  if (from == x) {
    // The same loop with from spelt x: the compiler then knows the only overlap is
    // element with itself and vectorises it (with two pointers it falls back to scalar).
    for (; i + kLanes <= n; i += kLanes)
      for (std::size_t k = 0; k < kLanes; ++k) {
        const double d = static_cast<double>(to[i + k]) - static_cast<double>(x[i + k]);
        lane[k] += d * d;
        x[i + k] = static_cast<float>(static_cast<double>(x[i + k]) + alpha * d);
      }
  } else {
    for (; i + kLanes <= n; i += kLanes)
      for (std::size_t k = 0; k < kLanes; ++k) {
        const double d = static_cast<double>(to[i + k]) - static_cast<double>(from[i + k]);
        lane[k] += d * d;
        x[i + k] = static_cast<float>(static_cast<double>(x[i + k]) + alpha * d);
      }
  }
  double s = 0.0;
  for (const double l : lane) s += l;
  for (; i < n; ++i) {
    const double d = static_cast<double>(to[i]) - static_cast<double>(from[i]);
    s += d * d;
    x[i] = static_cast<float>(static_cast<double>(x[i]) + alpha * d);
  }
  return s;
}

HEARSAY_CLONES bool all_finite(std::size_t n, const float* x) {
  // Inf and NaN are the values whose exponent bits are all ones. Testing the bits as
  // integers vectorises (a float sum of x - x would be one serial add chain without
  // -ffast-math), raises no FP exceptions, and reading through memcpy lets x point into
  // a received network frame at any byte address. Blocks give an early exit.
  constexpr std::uint32_t kExponent = 0x7F800000u;
  constexpr std::size_t kBlock = 4096;
  const auto* bytes = reinterpret_cast<const unsigned char*>(x);
  for (std::size_t start = 0; start < n; start += kBlock) {
    const std::size_t end = std::min(n, start + kBlock);
    std::uint32_t special = 0;
    for (std::size_t i = start; i < end; ++i) {
      std::uint32_t bits;
      std::memcpy(&bits, bytes + i * sizeof(float), sizeof bits);
      special |= (bits & kExponent) == kExponent;
    }
    if (special) return false;
  }
  return true;
}

}  // namespace hearsay::cpu
