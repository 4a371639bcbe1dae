// Timing helpers shared by the benchmark programs: medians, not means, because the
// machines they run on are shared and noisy.
#pragma once
#include <algorithm>
#include <chrono>
#include <vector>

#include "base/fiber.hpp"

namespace hearsay::bench {

// steady_clock off a virtual-time scheduler; the same type as transport::Clock, so that a
// benchmark may use both namespaces.
using Clock = hearsay::fiber::Clock;

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Median seconds of `repeats` timed calls of run(), after one untimed warm-up call.
template <class F>
double median_seconds(int repeats, F&& run) {
  run();
  std::vector<double> seconds;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    run();
    seconds.push_back(seconds_since(t0));
  }
  return median(seconds);
}

}  // namespace hearsay::bench
