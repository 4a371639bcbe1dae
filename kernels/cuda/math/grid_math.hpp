// Launch geometry of the element-wise kernels, as plain arithmetic: how many blocks a
// launch gets, and which items a thread of a grid-stride loop visits. The launchers ask
// the device for its SM count and call these; the CPU tests check that every item is
// visited exactly once for any size and grid.
#pragma once
#include <cstddef>

namespace hearsay::cuda {

// Resident blocks per SM that saturate memory bandwidth for the streaming kernels.
inline constexpr unsigned kBlocksPerSm = 8;

// Blocks for `work` independent items at `threads` per block on a device of `sms` SMs: one
// item per thread up to kBlocksPerSm waves (grid-stride loops cover the rest); at least 1,
// so that an empty launch is still a valid one.
inline unsigned grid_blocks(std::size_t work, unsigned threads, int sms) {
  const std::size_t cap = static_cast<std::size_t>(sms > 0 ? sms : 1) * kBlocksPerSm;
  const std::size_t want = (work + threads - 1) / threads;
  return static_cast<unsigned>(want < cap ? (want > 0 ? want : 1) : cap);
}

// The items thread `tid` (block * threads + thread) of a grid of `grid_threads` visits in a
// grid-stride loop over [0, work): tid, tid + grid_threads, ... Calls visit(i) for each.
template <class Visit>
inline void grid_stride_items(std::size_t work, std::size_t tid, std::size_t grid_threads, Visit&& visit) {
  for (std::size_t i = tid; i < work; i += grid_threads) visit(i);
}

}  // namespace hearsay::cuda
