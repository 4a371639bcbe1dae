#include "kernels/cuda/convert.hpp"

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/launch.hpp"
#include "kernels/cuda/math/convert_math.hpp"

namespace hearsay::cuda {
namespace {

using detail::grid_for;
using detail::kThreads;
using detail::require_aligned;
using detail::require_pointer;

enum class Conv { to_f16, from_f16, to_bf16, from_bf16 };

template <Conv op, class In, class Out>
__global__ void convert_kernel(std::size_t n, const In* __restrict__ x, Out* __restrict__ y) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    if constexpr (op == Conv::to_f16) y[i] = f16_from_f32(x[i]);
    if constexpr (op == Conv::from_f16) y[i] = f32_from_f16(x[i]);
    if constexpr (op == Conv::to_bf16) y[i] = bf16_from_f32(x[i]);
    if constexpr (op == Conv::from_bf16) y[i] = f32_from_bf16(x[i]);
  }
}

// One block per chunk (grid-stride over chunks): max|x| by an integer max over the
// block (exact in any order), then every thread quantizes its elements with the scale.
__global__ void __launch_bounds__(kThreads)
    f32_to_int8_kernel(std::size_t n, std::size_t chunk, const float* __restrict__ x,
                       std::int8_t* __restrict__ q, float* __restrict__ scales) {
  __shared__ std::uint32_t top[kThreads];
  const std::size_t chunks = (n + chunk - 1) / chunk;
  for (std::size_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const std::size_t start = c * chunk;
    const std::size_t len = n - start < chunk ? n - start : chunk;
    std::uint32_t m = 0;
    for (std::size_t i = threadIdx.x; i < len; i += blockDim.x) {
      const std::uint32_t a = abs_bits(x[start + i]);
      m = a > m ? a : m;
    }
    top[threadIdx.x] = m;
    __syncthreads();
    for (unsigned half = kThreads / 2; half > 0; half /= 2) {
      if (threadIdx.x < half && top[threadIdx.x + half] > top[threadIdx.x])
        top[threadIdx.x] = top[threadIdx.x + half];
      __syncthreads();
    }
    const float scale = int8_scale(top[0]);
    if (threadIdx.x == 0) scales[c] = scale;
    for (std::size_t i = threadIdx.x; i < len; i += blockDim.x)
      q[start + i] = int8_quantize(x[start + i], scale);
    __syncthreads();  // top[0] is read by all before the next chunk overwrites it
  }
}

__global__ void int8_to_f32_kernel(std::size_t n, std::size_t chunk, const std::int8_t* __restrict__ q,
                                   const float* __restrict__ scales, float* __restrict__ y) {
  const std::size_t chunks = (n + chunk - 1) / chunk;
  for (std::size_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const std::size_t start = c * chunk;
    const std::size_t len = n - start < chunk ? n - start : chunk;
    const float scale = scales[c];
    for (std::size_t i = threadIdx.x; i < len; i += blockDim.x)
      y[start + i] = int8_dequantize(q[start + i], scale);
  }
}

// Raises *flag when any value has all exponent bits set (inf or NaN); see vector.cu.
template <bool bf16>
__global__ void special16_flag_kernel(std::size_t n, const std::uint16_t* x, unsigned* flag) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    if (bf16 ? bf16_special(x[i]) : f16_special(x[i])) {
      *flag = 1u;
      return;
    }
  }
}

template <Conv op, class In, class Out>
void launch_convert(const char* name, std::size_t n, const In* x, Out* y, cudaStream_t stream) {
  if (n == 0) return;
  require_pointer(name, "x", x);
  require_pointer(name, "y", y);
  require_aligned(name, "x", x, sizeof(In));
  require_aligned(name, "y", y, sizeof(Out));
  convert_kernel<op, In, Out><<<grid_for(n), kThreads, 0, stream>>>(n, x, y);
  HEARSAY_CUDA_CHECK(cudaGetLastError());
}

// Checks shared by the int8 launchers; returns the number of chunks (0: nothing to do).
std::size_t check_int8(const char* name, std::size_t n, std::size_t chunk, const void* floats,
                       const char* floats_name, const void* q, const float* scales) {
  if (chunk == 0) detail::bad_value(name, "chunk", chunk, ">= 1");
  if (n == 0) return 0;
  require_pointer(name, floats_name, floats);
  require_pointer(name, "q", q);
  require_pointer(name, "scales", scales);
  require_aligned(name, floats_name, floats, sizeof(float));
  require_aligned(name, "scales", scales, sizeof(float));
  return (n - 1) / chunk + 1;
}

template <bool bf16>
bool all_finite16(const char* name, std::size_t n, const std::uint16_t* x, cudaStream_t stream) {
  if (n == 0) return true;
  require_pointer(name, "x", x);
  require_aligned(name, "x", x, sizeof(std::uint16_t));
  detail::StreamFlag flag(stream);
  special16_flag_kernel<bf16><<<grid_for(n), kThreads, 0, stream>>>(n, x, flag.get());
  HEARSAY_CUDA_CHECK(cudaGetLastError());
  return flag.read() == 0;
}

}  // namespace

void f32_to_f16(std::size_t n, const float* x, std::uint16_t* y, cudaStream_t stream) {
  launch_convert<Conv::to_f16>("f32_to_f16", n, x, y, stream);
}
void f16_to_f32(std::size_t n, const std::uint16_t* x, float* y, cudaStream_t stream) {
  launch_convert<Conv::from_f16>("f16_to_f32", n, x, y, stream);
}
void f32_to_bf16(std::size_t n, const float* x, std::uint16_t* y, cudaStream_t stream) {
  launch_convert<Conv::to_bf16>("f32_to_bf16", n, x, y, stream);
}
void bf16_to_f32(std::size_t n, const std::uint16_t* x, float* y, cudaStream_t stream) {
  launch_convert<Conv::from_bf16>("bf16_to_f32", n, x, y, stream);
}

void f32_to_int8(std::size_t n, std::size_t chunk, const float* x, std::int8_t* q, float* scales,
                 cudaStream_t stream) {
  const std::size_t chunks = check_int8("f32_to_int8", n, chunk, x, "x", q, scales);
  if (chunks == 0) return;
  f32_to_int8_kernel<<<grid_for(chunks * kThreads), kThreads, 0, stream>>>(n, chunk, x, q, scales);
  HEARSAY_CUDA_CHECK(cudaGetLastError());
}

void int8_to_f32(std::size_t n, std::size_t chunk, const std::int8_t* q, const float* scales, float* y,
                 cudaStream_t stream) {
  const std::size_t chunks = check_int8("int8_to_f32", n, chunk, y, "y", q, scales);
  if (chunks == 0) return;
  int8_to_f32_kernel<<<grid_for(chunks * kThreads), kThreads, 0, stream>>>(n, chunk, q, scales, y);
  HEARSAY_CUDA_CHECK(cudaGetLastError());
}

bool f16_all_finite(std::size_t n, const std::uint16_t* x, cudaStream_t stream) {
  return all_finite16<false>("f16_all_finite", n, x, stream);
}
bool bf16_all_finite(std::size_t n, const std::uint16_t* x, cudaStream_t stream) {
  return all_finite16<true>("bf16_all_finite", n, x, stream);
}

}  // namespace hearsay::cuda
