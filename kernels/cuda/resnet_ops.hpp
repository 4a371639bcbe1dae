// The element-wise operations ResNet adds on the device, besides cuDNN's BatchNorm
// (kernels/cuda/batchnorm.hpp): global average pooling, the end of a residual block and
// BatchNorm's batch counter. Launchers are plain C++ declarations; the kernels are in
// resnet_ops.cu and their arithmetic in math/resnet_math.hpp. Pointers are device pointers
// to fp32. Every launcher queues its work on `stream` (asynchronous), launches nothing for
// an empty shape (null pointers are then fine), and throws std::invalid_argument naming the
// launcher and the value for a negative size or a null pointer with a non-empty shape, and
// CudaError when the launch fails. Results are bit-identical to the CPU layers'.
#pragma once
#include <cuda_runtime_api.h>

namespace hearsay::cuda {

// y[p] = the mean of plane p of x [planes x pixels] (GlobalAvgPool2d: planes = N*C,
// pixels = H*W >= 1). One thread per plane sums it in order.
void global_avgpool_forward(long planes, long pixels, const float* x, float* y, cudaStream_t stream);
// dx[p][k] = dy[p] / pixels; dx is overwritten.
void global_avgpool_backward(long planes, long pixels, const float* dy, float* dx, cudaStream_t stream);
// y = max(0, y + x) over n elements (a BasicBlock's sum and final ReLU); x may not alias y.
void add_relu(long n, const float* x, float* y, cudaStream_t stream);
// *counter += 1 (BatchNorm's num_batches_tracked, a float of the model's state).
void count_batch(float* counter, cudaStream_t stream);

}  // namespace hearsay::cuda
