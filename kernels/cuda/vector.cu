#include "kernels/cuda/vector.hpp"

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/launch.hpp"
#include "kernels/cuda/math/vector_math.hpp"

namespace hearsay::cuda {
namespace {

using detail::grid_for;
using detail::kThreads;
using detail::require_pointer;

// Element-wise axpby with float4 loads and stores on the aligned body.
//   [0, head)                  scalar: brings x and y to a 16-byte boundary (head < 4)
//   [head, head + 4*n_vec)     float4, grid-stride
//   [head + 4*n_vec, n)        scalar tail (< 4 elements)
// The launcher guarantees x + head and y + head are both 16-byte aligned. x and y are not
// __restrict__: y may alias x (each element is read before it is written by one thread).
__global__ void axpby_vec4_kernel(std::size_t n, std::size_t head, std::size_t n_vec, float a, const float* x,
                                  float b, float* y) {
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

__global__ void weighted_sum_kernel(std::size_t n, WeightedInputs in, float* y) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = weighted_sum_at(in, i);  // every input is read before y[i] is written: y may alias one
}

__global__ void fill_kernel(std::size_t n, float value, float* x) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    x[i] = value;
}

__global__ void add_kernel(std::size_t n, const float* x, float* y) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = add_rn(y[i], x[i]);
}

__global__ void scale_kernel(std::size_t n, float a, float* x) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    x[i] = mul_rn(x[i], a);
}

// Raises *flag when any element is inf or NaN. Every writer stores the same value, so
// the unsynchronised stores are harmless; a thread stops at its first bad element.
__global__ void special_flag_kernel(std::size_t n, const float* x, unsigned* flag) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    if (f32_bits_special(bits_of(x[i]))) {
      *flag = 1u;
      return;
    }
  }
}

}  // namespace

void axpby(std::size_t n, float a, const float* x, float b, float* y, cudaStream_t stream) {
  if (n == 0) return;
  if (x == nullptr || y == nullptr)
    throw std::invalid_argument("hearsay::cuda::axpby: null pointer with n > 0");

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

void weighted_sum(std::size_t n, std::size_t k, const float* const* xs, const float* w, float* y,
                  cudaStream_t stream) {
  constexpr const char* kName = "weighted_sum";
  if (k == 0 || k > kMaxWeightedInputs)
    detail::bad_value(kName, "k", k, "between 1 and 16 (the inputs travel in the kernel arguments)");
  if (n == 0) return;
  require_pointer(kName, "xs", xs);
  require_pointer(kName, "w", w);
  require_pointer(kName, "y", y);
  WeightedInputs in{};
  in.k = static_cast<unsigned>(k);
  for (std::size_t j = 0; j < k; ++j) {
    if (xs[j] == nullptr) detail::bad_argument(kName, "xs[" + std::to_string(j) + "] is null with n > 0");
    in.xs[j] = xs[j];
    in.w[j] = w[j];
  }
  weighted_sum_kernel<<<grid_for(n), kThreads, 0, stream>>>(n, in, y);
  HEARSAY_CUDA_CHECK(cudaGetLastError());
}

void fill(std::size_t n, float value, float* x, cudaStream_t stream) {
  if (n == 0) return;
  require_pointer("fill", "x", x);
  fill_kernel<<<grid_for(n), kThreads, 0, stream>>>(n, value, x);
  HEARSAY_CUDA_CHECK(cudaGetLastError());
}

void add(std::size_t n, const float* x, float* y, cudaStream_t stream) {
  if (n == 0) return;
  require_pointer("add", "x", x);
  require_pointer("add", "y", y);
  add_kernel<<<grid_for(n), kThreads, 0, stream>>>(n, x, y);
  HEARSAY_CUDA_CHECK(cudaGetLastError());
}

void scale(std::size_t n, float a, float* x, cudaStream_t stream) {
  if (n == 0) return;
  require_pointer("scale", "x", x);
  scale_kernel<<<grid_for(n), kThreads, 0, stream>>>(n, a, x);
  HEARSAY_CUDA_CHECK(cudaGetLastError());
}

bool all_finite(std::size_t n, const float* x, cudaStream_t stream) {
  if (n == 0) return true;
  require_pointer("all_finite", "x", x);
  detail::StreamFlag flag(stream);
  special_flag_kernel<<<grid_for(n), kThreads, 0, stream>>>(n, x, flag.get());
  HEARSAY_CUDA_CHECK(cudaGetLastError());
  return flag.read() == 0;
}

}  // namespace hearsay::cuda
