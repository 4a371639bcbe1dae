// The numbers of a cuDNN BatchNorm call, in plain C++ (no CUDA headers) so that they are
// tested on every build against the CPU BatchNorm2d (tests/test_cuda_batchnorm_layout.cpp):
// the descriptor of x, dy, dx and y (packed NCHW), the per-channel tensor cuDNN derives for
// the spatial mode (1 x C x 1 x 1: gamma, beta, the running and the saved statistics),
// and when a training pass may run. kernels/cuda/batchnorm.cpp sets the descriptors from
// exactly these values.
#pragma once
#include <array>
#include <climits>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

namespace hearsay::cuda {

struct BatchNormDescriptors {
  int n, c, h, w;  // x, y, dx and dy: NCHW
  // Element strides of dims N, C, H, W: packed NCHW, as conv_layout.hpp's.
  int strides[4];

  std::int64_t elements() const { return std::int64_t{n} * strides[0]; }
  // The values each channel is normalised over (N x H x W, PyTorch's M).
  std::int64_t per_channel() const { return std::int64_t{n} * h * w; }
  // cuDNN's running variance is the batch variance times M / (M - 1), as PyTorch's, which
  // needs M >= 2: BatchNorm2d refuses a training pass below that, and so do the plans.
  bool can_train() const { return per_channel() >= 2; }
};

// The descriptors of BatchNorm over an [n, c, h, w] tensor. Throws std::invalid_argument
// for a non-positive size or a tensor larger than cuDNN's int-sized descriptors take.
inline BatchNormDescriptors batchnorm_descriptors(std::int64_t n, std::int64_t c, std::int64_t h,
                                                  std::int64_t w) {
  if (n <= 0 || c <= 0 || h <= 0 || w <= 0)
    throw std::invalid_argument("batchnorm_descriptors: sizes must be positive, got " + std::to_string(n) +
                                "x" + std::to_string(c) + "x" + std::to_string(h) + "x" + std::to_string(w));
  // Multiplied one size at a time, each product checked before the next can overflow.
  std::int64_t elements = 1;
  for (const std::int64_t size : {n, c, h, w}) {
    if (size > INT_MAX || elements * size > INT_MAX)
      throw std::invalid_argument("batchnorm_descriptors: a " + std::to_string(n) + "x" + std::to_string(c) +
                                  "x" + std::to_string(h) + "x" + std::to_string(w) +
                                  " tensor is too large for cuDNN's descriptors");
    elements *= size;
  }
  BatchNormDescriptors d{};
  d.n = static_cast<int>(n);
  d.c = static_cast<int>(c);
  d.h = static_cast<int>(h);
  d.w = static_cast<int>(w);
  d.strides[3] = 1;
  d.strides[2] = d.w;
  d.strides[1] = d.h * d.w;
  d.strides[0] = d.c * d.strides[1];
  return d;
}

// The per-channel tensor's dims, as cudnnDeriveBNTensorDescriptor gives them for
// CUDNN_BATCHNORM_SPATIAL.
inline std::array<int, 4> batchnorm_param_dims(const BatchNormDescriptors& d) { return {1, d.c, 1, 1}; }

// What a BatchNorm plan is made for: the input's shape.
using BatchNormPlanKey = std::array<int, 4>;
inline BatchNormPlanKey batchnorm_plan_key(const BatchNormDescriptors& d) { return {d.n, d.c, d.h, d.w}; }

}  // namespace hearsay::cuda
