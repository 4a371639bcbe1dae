// Shared by the host tests of kernels/cuda/math (test_cuda_math*.cpp): random data, data
// at every alignment phase, and element-by-element comparison with a report of the first
// difference. These tests run the device kernels' per-element functions on the CPU, so
// they need no GPU and no CUDA headers.
#pragma once
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "base/rng.hpp"

namespace hearsay::cuda_math_test {

inline std::vector<float> normals(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = scale * static_cast<float>(rng.normal());
  return v;
}

// Whole numbers in [lo, hi]: their sums are exact in fp32 (below 2^24), so kernels that
// add in another order than kernels/cpu must still match it exactly, and a missing or
// doubled element shows.
inline std::vector<float> whole_numbers(std::size_t n, std::uint64_t seed, int lo, int hi) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v)
    x = static_cast<float>(lo + static_cast<int>(rng.below(static_cast<std::uint64_t>(hi - lo + 1))));
  return v;
}

// `values` copied `phase` elements past the start of a larger buffer, which is filled with
// a guard value: the per-element functions are run on pointers at every alignment phase
// a device buffer may have (offsets of 0..3 floats from a 16-byte boundary).
template <class T>
class Phased {
 public:
  Phased(const std::vector<T>& values, std::size_t phase, T guard = T{})
      : phase_(phase), storage_(values.size() + phase + 4, guard) {
    std::copy(values.begin(), values.end(), storage_.begin() + static_cast<std::ptrdiff_t>(phase));
    n_ = values.size();
  }
  T* data() { return storage_.data() + phase_; }
  std::vector<T> values() const {
    return std::vector<T>(storage_.begin() + static_cast<std::ptrdiff_t>(phase_),
                          storage_.begin() + static_cast<std::ptrdiff_t>(phase_ + n_));
  }

 private:
  std::size_t phase_, n_ = 0;
  std::vector<T> storage_;
};

inline bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }
// Equal values (so +0 == -0), or both NaN.
inline bool same_value(float a, float b) { return a == b || (std::isnan(a) && std::isnan(b)); }

// "" when got and want agree element by element under eq; otherwise how many differ and
// the first one, for INFO.
template <class T, class Eq>
std::string differences(const std::vector<T>& got, const std::vector<T>& want, Eq eq) {
  if (got.size() != want.size())
    return "sizes differ: " + std::to_string(got.size()) + " vs " + std::to_string(want.size());
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!eq(got[i], want[i]) && bad++ == 0) first = i;
  if (bad == 0) return "";
  std::ostringstream out;
  out << bad << " of " << got.size() << " differ, first at " << first << ": got " << +got[first] << ", want "
      << +want[first];
  return out.str();
}

}  // namespace hearsay::cuda_math_test
