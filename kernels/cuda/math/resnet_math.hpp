// Per-element arithmetic of the kernels ResNet adds (kernels/cuda/resnet_ops.cu): global
// average pooling, the residual sum with its ReLU, and the BatchNorm batch counter. Shared
// with the host tests that run them against the CPU layers (tests/test_cuda_batchnorm_layout.cpp):
// each function evaluates what model/layers computes, in the same order, so the results
// are bit-identical.
#pragma once
#include <cstddef>

#include "kernels/cuda/host_device.hpp"
#include "kernels/cuda/math/activation_math.hpp"

namespace hearsay::cuda {

// The mean of one plane of `pixels` values: summed in order, then times 1/pixels
// (GlobalAvgPool2d::forward).
HEARSAY_HD inline float plane_mean(const float* plane, long pixels) {
  const float inv = 1.0f / static_cast<float>(pixels);
  float s = 0.0f;
  for (long k = 0; k < pixels; ++k) s = add_rn(s, plane[k]);
  return mul_rn(s, inv);
}

// dx at flat element e of [planes x pixels] from dy [planes]: dy of its plane times
// 1/pixels (GlobalAvgPool2d::backward).
template <class Index>
HEARSAY_HD inline float plane_mean_grad(const float* dy, Index e, Index pixels) {
  const float inv = 1.0f / static_cast<float>(pixels);
  return mul_rn(dy[e / pixels], inv);
}

// The end of a BasicBlock: relu(y + x), as cpu::add then cpu::relu_forward round it.
HEARSAY_HD inline float add_relu_at(float y, float x) { return relu(add_rn(y, x)); }

// Whether a grid-stride loop of `grid_threads` threads over `elements` items may index in
// 32 bits: every index it forms, up to the last one past the end (< elements +
// grid_threads), stays below 2^31.
inline bool fits_index32(std::size_t elements, std::size_t grid_threads) {
  constexpr std::size_t kMax32 = 0x7FFFFFFFu;
  return elements <= kMax32 && grid_threads <= kMax32 - elements;
}

}  // namespace hearsay::cuda
