// Launch geometry of the CUDA element-wise kernels (kernels/cuda/math/grid_math.hpp), on
// the CPU: the grid is never empty, never more than the resident waves, and a grid-stride
// loop over it visits every item exactly once, whatever the size and the device.
#include <catch2/catch.hpp>
#include <cstddef>
#include <vector>

#include "kernels/cuda/math/grid_math.hpp"

using namespace hearsay;

TEST_CASE("grid_blocks: one item per thread up to the resident waves, never an empty grid", "[cuda_math]") {
  CHECK(cuda::grid_blocks(0, 256, 132) == 1);
  CHECK(cuda::grid_blocks(1, 256, 132) == 1);
  CHECK(cuda::grid_blocks(256, 256, 132) == 1);
  CHECK(cuda::grid_blocks(257, 256, 132) == 2);
  CHECK(cuda::grid_blocks(std::size_t{1} << 30, 256, 132) == 132 * cuda::kBlocksPerSm);
  CHECK(cuda::grid_blocks(1000, 256, 0) == 4);  // a device that reports no SMs counts as one
  CHECK(cuda::grid_blocks(std::size_t{1} << 30, 256, 0) == cuda::kBlocksPerSm);
}

TEST_CASE("a grid-stride loop over grid_blocks visits every item exactly once", "[cuda_math]") {
  const unsigned threads_per_block[] = {32, 256, 512};
  const int sms[] = {1, 3, 132};
  const std::size_t works[] = {0, 1, 31, 255, 256, 257, 4095, 100003};
  for (const unsigned threads : threads_per_block)
    for (const int s : sms)
      for (const std::size_t work : works) {
        const std::size_t grid_threads = std::size_t{cuda::grid_blocks(work, threads, s)} * threads;
        std::vector<int> visits(work, 0);
        for (std::size_t tid = 0; tid < grid_threads; ++tid)
          cuda::grid_stride_items(work, tid, grid_threads, [&](std::size_t i) { ++visits[i]; });
        std::size_t wrong = 0;
        for (const int v : visits) wrong += v != 1;
        INFO("threads " << threads << ", sms " << s << ", work " << work);
        CHECK(wrong == 0);
      }
}
