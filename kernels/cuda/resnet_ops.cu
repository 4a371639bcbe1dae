#include <cstddef>
#include <cstdint>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/launch.hpp"
#include "kernels/cuda/math/resnet_math.hpp"
#include "kernels/cuda/resnet_ops.hpp"

namespace hearsay::cuda {
namespace {

using detail::bad_value;
using detail::grid_for;
using detail::kThreads;
using detail::require_pointer;

template <class Index>
__global__ void global_avgpool_forward_kernel(Index planes, Index pixels, const float* x, float* y) {
  const Index stride = static_cast<Index>(gridDim.x) * blockDim.x;
  for (Index p = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; p < planes; p += stride)
    y[p] = plane_mean(x + p * pixels, static_cast<long>(pixels));
}

template <class Index>
__global__ void global_avgpool_backward_kernel(Index total, Index pixels, const float* dy, float* dx) {
  const Index stride = static_cast<Index>(gridDim.x) * blockDim.x;
  for (Index e = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride)
    dx[e] = plane_mean_grad(dy, e, pixels);
}

__global__ void add_relu_kernel(std::size_t n, const float* x, float* y) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = add_relu_at(y[i], x[i]);
}

__global__ void count_batch_kernel(float* counter) { *counter = add_rn(*counter, 1.0f); }

// Checks planes and pixels; returns the element count (0: nothing to do).
std::size_t check_planes(const char* name, long planes, long pixels) {
  if (planes < 0) bad_value(name, "planes", planes, ">= 0");
  if (pixels < 1) bad_value(name, "pixels", pixels, ">= 1");
  return static_cast<std::size_t>(planes) * static_cast<std::size_t>(pixels);
}

}  // namespace

void global_avgpool_forward(long planes, long pixels, const float* x, float* y, cudaStream_t stream) {
  constexpr const char* kName = "global_avgpool_forward";
  const std::size_t total = check_planes(kName, planes, pixels);
  if (total == 0) return;
  require_pointer(kName, "x", x);
  require_pointer(kName, "y", y);
  const unsigned grid = grid_for(static_cast<std::size_t>(planes));
  // The plane offsets p * pixels reach the element count.
  if (fits_index32(total, std::size_t{grid} * kThreads)) {
    global_avgpool_forward_kernel<std::uint32_t><<<grid, kThreads, 0, stream>>>(
        static_cast<std::uint32_t>(planes), static_cast<std::uint32_t>(pixels), x, y);
  } else {
    global_avgpool_forward_kernel<std::uint64_t><<<grid, kThreads, 0, stream>>>(
        static_cast<std::uint64_t>(planes), static_cast<std::uint64_t>(pixels), x, y);
  }
  HEARSAY_CUDA_CHECK(cudaGetLastError());
}

void global_avgpool_backward(long planes, long pixels, const float* dy, float* dx, cudaStream_t stream) {
  constexpr const char* kName = "global_avgpool_backward";
  const std::size_t total = check_planes(kName, planes, pixels);
  if (total == 0) return;
  require_pointer(kName, "dy", dy);
  require_pointer(kName, "dx", dx);
  const unsigned grid = grid_for(total);
  if (fits_index32(total, std::size_t{grid} * kThreads)) {
    global_avgpool_backward_kernel<std::uint32_t><<<grid, kThreads, 0, stream>>>(
        static_cast<std::uint32_t>(total), static_cast<std::uint32_t>(pixels), dy, dx);
  } else {
    global_avgpool_backward_kernel<std::uint64_t>
        <<<grid, kThreads, 0, stream>>>(total, static_cast<std::uint64_t>(pixels), dy, dx);
  }
  HEARSAY_CUDA_CHECK(cudaGetLastError());
}

void add_relu(long n, const float* x, float* y, cudaStream_t stream) {
  constexpr const char* kName = "add_relu";
  if (n < 0) bad_value(kName, "n", n, ">= 0");
  if (n == 0) return;
  require_pointer(kName, "x", x);
  require_pointer(kName, "y", y);
  const auto count = static_cast<std::size_t>(n);
  add_relu_kernel<<<grid_for(count), kThreads, 0, stream>>>(count, x, y);
  HEARSAY_CUDA_CHECK(cudaGetLastError());
}

void count_batch(float* counter, cudaStream_t stream) {
  require_pointer("count_batch", "counter", counter);
  count_batch_kernel<<<1, 1, 0, stream>>>(counter);
  HEARSAY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace hearsay::cuda
