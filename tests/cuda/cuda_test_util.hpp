// Shared by the GPU tests: random host data, device round trips, and comparison with a
// reference under a relative bound that scales with the size of the terms.
#pragma once
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "base/rng.hpp"
#include "kernels/cuda/device.hpp"
#include "model/model.hpp"
#include "model/trainer.hpp"

namespace hearsay::cuda_test {

inline std::vector<float> random_normal(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = scale * static_cast<float>(rng.normal());
  return v;
}

inline cuda::DeviceBuffer<float> to_device(std::span<const float> host) {
  cuda::DeviceBuffer<float> d(host.size());
  d.copy_from_host(host);
  return d;
}

inline std::vector<float> to_host(const cuda::DeviceBuffer<float>& d) {
  std::vector<float> v(d.size());
  d.copy_to_host(v);
  return v;
}

// Largest |got - want| / (|want| + floor) over the buffers; floor keeps elements near zero
// (where a relative error means nothing) from dominating.
inline double worst_relative_error(std::span<const float> got, std::span<const float> want, double floor) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(double(got[i]) - double(want[i])) / (std::fabs(double(want[i])) + floor);
    if (!(d <= worst)) worst = d;  // NaN propagates as the worst
  }
  return worst;
}

// `values` in device memory `phase` elements past a 16-byte boundary (for floats: every
// alignment phase a kernel's vector path may meet), with guard elements before and after
// that a correct kernel never writes.
template <class T>
class Guarded {
 public:
  static constexpr std::size_t kPad =
      8;  // elements of guard on each side (16-byte multiple for T <= 8 bytes)

  Guarded(std::span<const T> values, std::size_t phase, T guard)
      : n_(values.size()), offset_(kPad + phase), guard_(guard), buffer_(values.size() + 2 * kPad + phase) {
    std::vector<T> host(buffer_.size(), guard);
    std::copy(values.begin(), values.end(), host.begin() + static_cast<std::ptrdiff_t>(offset_));
    buffer_.copy_from_host(host);
  }
  Guarded(const std::vector<T>& values, std::size_t phase, T guard)
      : Guarded(std::span<const T>(values), phase, guard) {}

  T* data() { return buffer_.data() + offset_; }
  std::size_t size() const { return n_; }
  std::vector<T> values() const {
    std::vector<T> v(n_);
    buffer_.copy_to_host(v, offset_);
    return v;
  }
  // Guard elements that no longer hold the guard's bits.
  std::size_t guards_touched() const {
    std::vector<T> all(buffer_.size());
    buffer_.copy_to_host(all);
    std::size_t touched = 0;
    for (std::size_t i = 0; i < all.size(); ++i)
      if ((i < offset_ || i >= offset_ + n_) && std::memcmp(&all[i], &guard_, sizeof(T)) != 0) ++touched;
    return touched;
  }

 private:
  std::size_t n_, offset_;
  T guard_;
  cuda::DeviceBuffer<T> buffer_;
};

// How many elements of got and want differ under eq, and the first one, for INFO; ""
// when none do.
template <class T, class Eq>
std::string differences(const std::vector<T>& got, const std::vector<T>& want, Eq eq) {
  if (got.size() != want.size()) return "sizes differ";
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!eq(got[i], want[i]) && bad++ == 0) first = i;
  if (bad == 0) return "";
  std::ostringstream out;
  out.precision(9);
  out << bad << " of " << got.size() << " differ, first at " << first << ": got " << +got[first] << ", want "
      << +want[first];
  return out.str();
}

// Identical bits (so -0 differs from +0), except that any NaN equals any NaN: IEEE 754
// leaves a NaN result's sign and payload to the implementation (x86 produces the negative
// default NaN, NVIDIA GPUs 0x7fffffff), so only NaN-ness is portable between them.
template <class T>
bool same_bits(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) && std::isnan(b)) return true;
  }
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}
// Each element times (1 + rel) or (1 - rel), the sign drawn from `seed`: a change of a few
// ulps (rel ~1e-5) with which the CPU measures how far its own result moves for a change
// the size of the GPU's rounding (see resnet_test_util.hpp's check_tensors).
inline void perturb(std::span<float> v, double rel, std::uint64_t seed) {
  Rng rng(seed);
  for (float& x : v) x = static_cast<float>(x * (1.0 + (rng.uniform() < 0.5 ? -rel : rel)));
}

// How many times further than the CPU's own result moved (from inputs perturbed by ~1e-5)
// the GPU's may be. A single perturbation is one sample of how rounding spreads through
// the steps, while the GPU's rounding enters at every step: the ratio varies, and 50
// leaves room for that while a wrong kernel, which differs from the first step on by
// orders of magnitude more than 1e-5, still fails.
inline constexpr double kMovedFactor = 50.0;
// Below this absolute difference any two fp32 results of O(1) terms agree.
inline constexpr double kAbsFloor = 1e-6;

// The largest |a - b| over one tensor (NaN when any element is NaN), where it is, and max |b|.
struct TensorDiff {
  double diff = 0, scale = 0;
  std::int64_t worst = 0;
};
inline TensorDiff tensor_diff(std::span<const float> a, std::span<const float> b, const NamedTensor& t) {
  TensorDiff r{0, 0, t.offset};
  for (std::int64_t i = t.offset; i < t.offset + t.shape.numel(); ++i) {
    const auto k = static_cast<std::size_t>(i);
    const double d = std::fabs(double(a[k]) - double(b[k]));
    if (!(d <= r.diff)) {  // NaN propagates
      r.diff = d;
      r.worst = i;
    }
    r.scale = std::max(r.scale, std::fabs(double(b[k])));
  }
  return r;
}

// A batch's or the test set's statistics on the GPU against the CPU's: the loss within
// `rel_bound` of the CPU's, or within kMovedFactor times how far the CPU's own loss moved
// (`moved`, a CPU run from perturbed parameters); the correct count within `correct_slack`
// (a row whose two largest logits are within rounding of each other may pick either).
inline void check_stats(const BatchStats& got, const BatchStats& want, std::int64_t correct_slack,
                        double rel_bound, const BatchStats* moved = nullptr) {
  const double moved_diff = moved ? std::fabs(moved->loss_sum - want.loss_sum) : 0.0;
  INFO("loss " << got.loss_sum << " against " << want.loss_sum << ", correct " << got.correct << " against "
               << want.correct << "; the CPU's loss moved by " << moved_diff);
  CHECK(got.count == want.count);
  CHECK(std::fabs(got.loss_sum - want.loss_sum) <=
        std::max(rel_bound * std::fabs(want.loss_sum), kMovedFactor * moved_diff));
  CHECK(std::abs(got.correct - want.correct) <= correct_slack);
}

// Equal values (+0 == -0) or both NaN.
inline bool same_value(float a, float b) { return a == b || (std::isnan(a) && std::isnan(b)); }

}  // namespace hearsay::cuda_test
