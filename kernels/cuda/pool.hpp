// 2-D pooling over NCHW planes on the device (no padding; window k, stride s):
// kernels/cpu/pool.hpp's operations, `planes` = N*C independent H x W planes. Launchers
// are plain C++ declarations; the kernels are in pool.cu. Pointers are device pointers
// to fp32. Every launcher queues its work on `stream` (asynchronous), launches nothing
// for planes == 0 (null pointers are then fine), and throws std::invalid_argument naming
// the launcher and the value for a bad geometry (kernel or stride < 1, a plane smaller
// than the window), negative planes or a null pointer, and CudaError when the launch
// fails. Results are bit-identical to kernels/cpu's: the backward passes are gathers
// that add each input pixel's contributions in the order kernels/cpu scatters them, so
// they are also deterministic, with no atomics.
#pragma once
#include <cuda_runtime_api.h>

#include "kernels/cpu/pool.hpp"

namespace hearsay::cuda {

void avgpool_forward(const cpu::PoolGeometry& g, long planes, const float* x, float* y, cudaStream_t stream);
// dx is overwritten (pixels past the last full window get 0). relu_output, when not null,
// is the pool's input as a ReLU produced it: dx is zeroed where it is <= 0 (that ReLU's
// backward, fused).
void avgpool_backward(const cpu::PoolGeometry& g, long planes, const float* dy, float* dx,
                      const float* relu_output, cudaStream_t stream);
void maxpool_forward(const cpu::PoolGeometry& g, long planes, const float* x, float* y, cudaStream_t stream);
// dx is overwritten; each window's gradient goes to its first maximum, recomputed from x.
void maxpool_backward(const cpu::PoolGeometry& g, long planes, const float* x, const float* dy, float* dx,
                      cudaStream_t stream);

}  // namespace hearsay::cuda
