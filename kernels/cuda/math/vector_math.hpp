// Per-element arithmetic of the vector kernels (kernels/cuda/vector.cu), shared with the
// host tests that sweep it against kernels/cpu/vector.cpp.
#pragma once
#include <cstddef>

#include "kernels/cuda/host_device.hpp"

namespace hearsay::cuda {

// The most buffers weighted_sum mixes in one pass (its pointers and weights travel by
// value in the kernel arguments).
constexpr std::size_t kMaxWeightedInputs = 16;

struct WeightedInputs {
  const float* xs[kMaxWeightedInputs];
  float w[kMaxWeightedInputs];
  unsigned k;  // 1..kMaxWeightedInputs
};

// Element i of sum_j w[j] * xs[j]: w[0]*x0, then + w[j]*xj in order, each product and sum
// rounded separately, as cpu::weighted_sum computes it (so the results are bit-identical).
HEARSAY_HD inline float weighted_sum_at(const WeightedInputs& in, std::size_t i) {
  float acc = mul_rn(in.w[0], in.xs[0][i]);
  for (unsigned j = 1; j < in.k; ++j) acc = add_rn(acc, mul_rn(in.w[j], in.xs[j][i]));
  return acc;
}

}  // namespace hearsay::cuda
