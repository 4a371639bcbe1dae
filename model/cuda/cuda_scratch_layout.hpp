// The device scratch of the layers the CUDA runner keeps from a layer's forward to its
// backward, in plain C++ (no CUDA headers) so that tests/test_cuda_batchnorm_layout.cpp
// checks it on every build: BatchNorm's saved batch statistics, and a BasicBlock's inner
// activations, gradient buffers and its BatchNorms' statistics (the device counterpart of
// BasicBlock::Scratch in model/layers/residual.cpp). Every region starts 256 bytes past
// the previous one's start at least (cudaMalloc's alignment), so cuDNN and the vector
// kernels see aligned pointers.
#pragma once
#include <algorithm>
#include <cstdint>

#include "model/layers/batchnorm2d.hpp"
#include "model/layers/residual.hpp"

namespace hearsay {

// Floats rounded up to a multiple of 64 (256 bytes).
inline std::int64_t device_aligned(std::int64_t floats) { return (floats + 63) / 64 * 64; }

// A BatchNorm2d's saved statistics: the batch's mean [C], then 1 / sqrt(var + eps) [C].
inline std::int64_t batchnorm_stats_floats(const BatchNorm2d& bn) { return 2 * std::int64_t{bn.channels()}; }

// A BasicBlock's regions for an input shape (batch included). a1, b1, a2, s1: conv1's,
// bn1's (after its ReLU), conv2's and the shortcut convolution's outputs (s1 empty without
// a projection); grad_a, grad_b: the gradients inside the block, as large as the larger of
// input and output (grad_a also holds the shortcut BatchNorm's output during forward);
// then the statistics of bn1, bn2 and the shortcut's BatchNorm (empty without one).
struct BlockScratchLayout {
  enum Region { a1, b1, a2, s1, grad_a, grad_b, bn1_stats, bn2_stats, shortcut_stats, regions };
  std::int64_t offset[regions + 1] = {};

  BlockScratchLayout(const BasicBlock& block, const Shape& input) {
    const Shape out = block.output_shape(input);
    const std::int64_t act = out.numel(), grad = std::max(input.numel(), out.numel());
    const std::int64_t stats = batchnorm_stats_floats(block.bn1());
    const std::int64_t size[regions] = {act,  act,   act,   block.projects() ? act : 0,  grad,
                                        grad, stats, stats, block.projects() ? stats : 0};
    for (int r = 0; r < regions; ++r) offset[r + 1] = offset[r] + device_aligned(size[r]);
  }
  std::int64_t size(Region r) const { return offset[r + 1] - offset[r]; }
  std::int64_t floats() const { return offset[regions]; }
  float* at(float* base, Region r) const { return base + offset[r]; }
};

// The device scratch of a layer for an input shape: BatchNorm2d's statistics, a
// BasicBlock's regions, nothing for the other layers.
inline std::int64_t device_scratch_floats(const Layer& layer, const Shape& input) {
  switch (layer.op()) {
    case Op::batchnorm2d:
      return device_aligned(batchnorm_stats_floats(static_cast<const BatchNorm2d&>(layer)));
    case Op::basic_block:
      return BlockScratchLayout(static_cast<const BasicBlock&>(layer), input).floats();
    default:
      return 0;
  }
}

}  // namespace hearsay
