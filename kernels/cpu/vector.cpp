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
