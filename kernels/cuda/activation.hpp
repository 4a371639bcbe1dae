// Activations and the bias epilogues and gradients of Linear and Conv2d on the device:
// kernels/cpu/activation.hpp's operations over a whole batch. Launchers are plain C++
// declarations (usable from .cpp files); the kernels are in activation.cu. Pointers are
// device pointers to fp32; lengths are element counts. Every launcher queues its work on
// `stream` (asynchronous; nullptr = the default stream), launches nothing for an empty
// shape (null pointers are then fine), and throws std::invalid_argument naming the
// launcher and the value for a negative size or a null pointer with a non-empty shape,
// and CudaError when the launch fails.
#pragma once
#include <cuda_runtime_api.h>

namespace hearsay::cuda {

// NCHW [batch x channels x pixels]: y[n][c][p] += bias[c], then max(0, .) when relu is set.
void bias_act_rows(long batch, int channels, long pixels, const float* bias, bool relu, float* y,
                   cudaStream_t stream);
// [batch x features]: y[b][f] += bias[f], then max(0, .) when relu is set.
void bias_act_cols(long batch, int features, const float* bias, bool relu, float* y, cudaStream_t stream);
// y = max(0, x); y may be the same pointer as x.
void relu_forward(long n, const float* x, float* y, cudaStream_t stream);
// dx = y > 0 ? dy : 0, from the ReLU's output y; dx may be the same pointer as dy.
void relu_backward(long n, const float* y, const float* dy, float* dx, cudaStream_t stream);
// db[c] = sum over n and p of dy[n][c][p] (overwrites db; zeros when batch*pixels is 0).
// Deterministic: one block per channel sums in a fixed order (strided partial sums, then
// a fixed tree), so the result does not depend on timing; it differs from
// cpu::bias_grad_rows's order by fp32 rounding only.
void bias_grad_rows(long batch, int channels, long pixels, const float* dy, float* db, cudaStream_t stream);
// db[f] = sum over b of dy[b][f] (overwrites db; zeros when batch is 0). Deterministic as above.
void bias_grad_cols(long batch, int features, const float* dy, float* db, cudaStream_t stream);

}  // namespace hearsay::cuda
