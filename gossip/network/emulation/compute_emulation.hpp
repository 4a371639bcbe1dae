// How a peer emulates a machine of another speed: after a step's computation it waits, with
// the CPU left to the other peers of the box.
#pragma once
#include <algorithm>
#include <chrono>

namespace hearsay::emulation {

// The wait after a computation that took `took`, so that the step's computation lasts
// max(took, least) · slowdown in all. `least` (--min-step-time) makes the peers of a box
// with fewer cores than peers run as machines of one speed of their own: without it their
// pace is how the box's scheduler shares the cores, and a slow peer that waits gives its
// share to the others. slowdown (--slowdown, slow:PEER:Fx) is 1 for a peer of normal speed.
inline std::chrono::nanoseconds emulated_compute_wait(std::chrono::nanoseconds took,
                                                      std::chrono::nanoseconds least, double slowdown) {
  const auto paced = std::max(took, least);
  const auto total = std::chrono::duration_cast<std::chrono::nanoseconds>(paced * std::max(slowdown, 1.0));
  return std::max(total - took, std::chrono::nanoseconds(0));
}

}  // namespace hearsay::emulation
