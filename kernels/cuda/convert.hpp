// Wire dtype conversions on the device (compressed gossip payloads): kernels/cpu/convert.hpp's
// operations with bit-identical results to cpu::portable, so a payload encoded on a GPU
// decodes to the same values on any peer. The per-element arithmetic is shared with the
// host tests in kernels/cuda/math/convert_math.hpp.
//
// Pointers are device pointers aligned to their element type (2 bytes for f16/bf16, 4
// for f32 and scales; int8 any). Launchers queue on `stream` (asynchronous unless
// stated), launch nothing for n == 0 (null pointers are then fine), and throw
// std::invalid_argument naming the launcher for a null or misaligned pointer, CudaError
// when the launch fails. Inputs and outputs must not overlap.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace hearsay::cuda {

void f32_to_f16(std::size_t n, const float* x, std::uint16_t* y, cudaStream_t stream);
void f16_to_f32(std::size_t n, const std::uint16_t* x, float* y, cudaStream_t stream);
void f32_to_bf16(std::size_t n, const float* x, std::uint16_t* y, cudaStream_t stream);
void bf16_to_f32(std::size_t n, const std::uint16_t* x, float* y, cudaStream_t stream);
// Symmetric int8 with one f32 scale per chunk (scales has ceil(n / chunk) entries), as
// cpu::f32_to_int8. One block per chunk. chunk == 0 throws std::invalid_argument, whatever n.
void f32_to_int8(std::size_t n, std::size_t chunk, const float* x, std::int8_t* q, float* scales,
                 cudaStream_t stream);
void int8_to_f32(std::size_t n, std::size_t chunk, const std::int8_t* q, const float* scales, float* y,
                 cudaStream_t stream);
// Synchronous (wait for `stream`): whether every encoded value is finite; true for n == 0.
bool f16_all_finite(std::size_t n, const std::uint16_t* x, cudaStream_t stream);
bool bf16_all_finite(std::size_t n, const std::uint16_t* x, cudaStream_t stream);

}  // namespace hearsay::cuda
