// Shared by the GPU tests: random host data, device round trips, and comparison with a
// reference under a relative bound that scales with the size of the terms.
#pragma once
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <span>
#include <vector>

#include "kernels/cuda/device.hpp"
#include "model/rng.hpp"

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

}  // namespace hearsay::cuda_test
