// Fused optimizer updates on flat fp32 buffers: one pass reads the gradient and the
// optimizer state once and writes parameters and state once, because at model sizes the
// step is memory-bound and separate elementwise passes would multiply the traffic.
// The arithmetic follows PyTorch's torch.optim.SGD and torch.optim.AdamW (single-tensor
// path) step by step, so a run can be checked against a PyTorch reference.
// No buffer may alias another.
#pragma once
#include <cstddef>
#include <cstdint>

namespace hearsay::cpu {

// torch.optim.SGD:
//   g = grad + weight_decay * p
//   momentum != 0:  buf = first_step ? g : momentum * buf + (1 - dampening) * g
//                   g = nesterov ? g + momentum * buf : buf
//   p -= lr * g
// first_step mirrors PyTorch creating the buffer as a copy of g (no dampening) on the
// first step; buf is not read then, so it may hold anything. momentum_buf may be null
// when momentum == 0. Throws std::invalid_argument for a null momentum_buf with momentum.
void sgd_update(std::size_t n, float* param, const float* grad, float* momentum_buf, float lr, float momentum,
                float dampening, float weight_decay, bool nesterov, bool first_step);

// torch.optim.AdamW (decoupled weight decay), step is 1-based:
//   p *= 1 - lr * weight_decay
//   m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g^2
//   p -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
// m and v start at zero. Throws std::invalid_argument for step < 1.
void adamw_update(std::size_t n, float* param, const float* grad, float* m, float* v, float lr, float beta1,
                  float beta2, float eps, float weight_decay, std::int64_t step);

}  // namespace hearsay::cpu
