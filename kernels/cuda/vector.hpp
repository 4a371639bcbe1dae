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

}  // namespace hearsay::cuda
