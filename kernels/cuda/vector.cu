#include "kernels/cuda/vector.hpp"

#include <cstdint>
#include <stdexcept>

#include "kernels/cuda/check.hpp"

namespace hearsay::cuda {
namespace {

constexpr unsigned kThreads = 256;
// Enough resident blocks to saturate memory bandwidth; the grid-stride loop covers the rest.
constexpr unsigned kBlocksPerSm = 8;

// Element-wise axpby with float4 loads and stores on the aligned body.
//   [0, head)                  scalar: brings x and y to a 16-byte boundary (head < 4)
//   [head, head + 4*n_vec)     float4, grid-stride
//   [head + 4*n_vec, n)        scalar tail (< 4 elements)
// The launcher guarantees x + head and y + head are both 16-byte aligned. x and y are not
// __restrict__: y may alias x (each element is read before it is written by one thread).
__global__ void axpby_vec4_kernel(std::size_t n, std::size_t head, std::size_t n_vec, float a,
                                  const float* x, float b, float* y) {
  const std::size_t tid = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const float4* x4 = reinterpret_cast<const float4*>(x + head);
  float4* y4 = reinterpret_cast<float4*>(y + head);
  for (std::size_t i = tid; i < n_vec; i += stride) {
    const float4 xv = x4[i];
    float4 yv = y4[i];
    yv.x = a * xv.x + b * yv.x;
    yv.y = a * xv.y + b * yv.y;
    yv.z = a * xv.z + b * yv.z;
    yv.w = a * xv.w + b * yv.w;
    y4[i] = yv;
  }
  if (tid < head) y[tid] = a * x[tid] + b * y[tid];
  const std::size_t t = head + 4 * n_vec + tid;  // t < n only for tid < 4
  if (t < n) y[t] = a * x[t] + b * y[t];
}

// Fallback when x and y cannot both be brought to 16-byte alignment.
__global__ void axpby_scalar_kernel(std::size_t n, float a, const float* x, float b, float* y) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    y[i] = a * x[i] + b * y[i];
  }
}

// Blocks for `work` independent items: one per item up to a few waves of the device.
unsigned grid_for(std::size_t work) {
  int device = 0;
  HEARSAY_CUDA_CHECK(cudaGetDevice(&device));
  int sms = 0;
  HEARSAY_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const std::size_t cap = static_cast<std::size_t>(sms > 0 ? sms : 1) * kBlocksPerSm;
  const std::size_t want = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(want < cap ? (want > 0 ? want : 1) : cap);
}

}  // namespace

void axpby(std::size_t n, float a, const float* x, float b, float* y, cudaStream_t stream) {
  if (n == 0) return;
  if (x == nullptr || y == nullptr) throw std::invalid_argument("hearsay::cuda::axpby: null pointer with n > 0");

  const auto xa = reinterpret_cast<std::uintptr_t>(x);
  const auto ya = reinterpret_cast<std::uintptr_t>(y);
  // fp32 buffers are at least 4-byte aligned; elements to the next 16-byte boundary of y.
  const std::size_t head_to_align = ((16 - (ya & 15)) & 15) / sizeof(float);
  const bool same_phase = (xa & 15) == (ya & 15) && (ya & 3) == 0;
  if (same_phase && n >= head_to_align + 4) {
    const std::size_t n_vec = (n - head_to_align) / 4;
    axpby_vec4_kernel<<<grid_for(n_vec), kThreads, 0, stream>>>(n, head_to_align, n_vec, a, x, b, y);
  } else {
    axpby_scalar_kernel<<<grid_for(n), kThreads, 0, stream>>>(n, a, x, b, y);
  }
  HEARSAY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace hearsay::cuda
