// Vector kernels on flat fp32 device buffers: the averaging used by gossip. The
// launchers are plain C++ declarations (usable from .cpp files); the kernels live in
// vector.cu next to them. All lengths are element counts.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

namespace hearsay::cuda {

// y = a*x + b*y on the device, queued on `stream` (asynchronous; nullptr = default
// stream). x and y are device pointers; y may be the same pointer as x, but the buffers
// must not otherwise overlap. Any alignment is accepted: when x and y share the same
// offset modulo 16 bytes the body uses float4 loads, otherwise a scalar loop.
// n == 0 launches nothing. Throws std::invalid_argument for a null pointer with n > 0
// and CudaError when the launch fails.
void axpby(std::size_t n, float a, const float* x, float b, float* y, cudaStream_t stream);

// The launchers below share axpby's contract (asynchronous on `stream` unless stated,
// n == 0 launches nothing, std::invalid_argument for a null pointer with n > 0) and give
// bit-identical results to their kernels/cpu counterparts.

// y = sum_j w[j] * xs[j] for j < k: xs is a host array of k device pointers and w a host
// array of k weights (both copied into the launch, so they may go away on return). y may
// be the same pointer as one of the xs. 1 <= k <= 16, else std::invalid_argument.
void weighted_sum(std::size_t n, std::size_t k, const float* const* xs, const float* w, float* y,
                  cudaStream_t stream);
void fill(std::size_t n, float value, float* x, cudaStream_t stream);
// y += x
void add(std::size_t n, const float* x, float* y, cudaStream_t stream);
// x *= a
void scale(std::size_t n, float a, float* x, cudaStream_t stream);
// Synchronous: waits for `stream` and returns true when every element is finite (no NaN
// or inf). Uses a flag in stream-ordered device memory; true for n == 0.
bool all_finite(std::size_t n, const float* x, cudaStream_t stream);

}  // namespace hearsay::cuda
