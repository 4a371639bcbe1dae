// Fused optimizer updates on flat fp32 device buffers: kernels/cpu/optim.hpp's SGD and
// AdamW with the same semantics, the same argument checks, and bit-identical results (the
// per-element arithmetic is shared with the host tests in kernels/cuda/math/optim_math.hpp).
// Launchers queue the update on `stream` (asynchronous); n == 0 launches nothing and
// accepts null pointers. No buffer may alias another. Throw std::invalid_argument for a
// null pointer with n > 0 (and where kernels/cpu throws), CudaError when the launch fails.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace hearsay::cuda {

// torch.optim.SGD, as cpu::sgd_update: momentum_buf may be null when momentum == 0;
// on first_step it is written, not read.
void sgd_update(std::size_t n, float* param, const float* grad, float* momentum_buf, float lr, float momentum,
                float dampening, float weight_decay, bool nesterov, bool first_step, cudaStream_t stream);

// torch.optim.AdamW, as cpu::adamw_update; step is 1-based (step < 1 throws, whatever n).
void adamw_update(std::size_t n, float* param, const float* grad, float* m, float* v, float lr, float beta1,
                  float beta2, float eps, float weight_decay, std::int64_t step, cudaStream_t stream);

}  // namespace hearsay::cuda
