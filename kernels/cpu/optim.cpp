#include "kernels/cpu/optim.hpp"

#include <cmath>
#include <stdexcept>

#include "kernels/cpu/dispatch.hpp"

namespace hearsay::cpu {

// Each case gets its own loop so that no loop carries a branch on the options: the
// vectoriser then sees straight-line code. __restrict tells it the buffers do not alias,
// which saves the runtime overlap checks.
HEARSAY_CLONES void sgd_update(std::size_t n, float* __restrict param, const float* __restrict grad,
                               float* __restrict momentum_buf, float lr, float momentum, float dampening,
                               float weight_decay, bool nesterov, bool first_step) {
  const float wd = weight_decay;
  if (momentum == 0.0f) {
    for (std::size_t i = 0; i < n; ++i) param[i] -= lr * (grad[i] + wd * param[i]);
    return;
  }
  if (momentum_buf == nullptr && n > 0) throw std::invalid_argument("sgd_update: momentum needs a buffer");
  float* __restrict buf = momentum_buf;
  if (first_step) {
    // PyTorch starts the buffer as a plain copy of g, without (1 - dampening).
    if (nesterov) {
      for (std::size_t i = 0; i < n; ++i) {
        const float g = grad[i] + wd * param[i];
        buf[i] = g;
        param[i] -= lr * (g + momentum * g);
      }
    } else {
      for (std::size_t i = 0; i < n; ++i) {
        const float g = grad[i] + wd * param[i];
        buf[i] = g;
        param[i] -= lr * g;
      }
    }
    return;
  }
  const float keep = 1.0f - dampening;
  if (nesterov) {
    for (std::size_t i = 0; i < n; ++i) {
      const float g = grad[i] + wd * param[i];
      const float b = momentum * buf[i] + keep * g;
      buf[i] = b;
      param[i] -= lr * (g + momentum * b);
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      const float g = grad[i] + wd * param[i];
      const float b = momentum * buf[i] + keep * g;
      buf[i] = b;
      param[i] -= lr * b;
    }
  }
}

// Vectorises only when this file is compiled with -fno-math-errno: otherwise GCC keeps a
// libm call on the errno path of every sqrt and leaves the loop scalar. (An optimize
// attribute or pragma does not help: errno-ness is fixed on the builtin's declaration.)
HEARSAY_CLONES void adamw_update(std::size_t n, float* __restrict param, const float* __restrict grad,
                                 float* __restrict m, float* __restrict v, float lr, float beta1, float beta2,
                                 float eps, float weight_decay, std::int64_t step) {
  if (step < 1) throw std::invalid_argument("adamw_update: step is 1-based and must be >= 1");
  // Bias corrections in double, as PyTorch computes them in Python floats, then rounded
  // once to the fp32 scalars the loop uses.
  const double t = static_cast<double>(step);
  const double bias1 = 1.0 - std::pow(static_cast<double>(beta1), t);
  const double bias2 = 1.0 - std::pow(static_cast<double>(beta2), t);
  const float step_size = static_cast<float>(static_cast<double>(lr) / bias1);
  const float bias2_sqrt = static_cast<float>(std::sqrt(bias2));
  const float decay = static_cast<float>(1.0 - static_cast<double>(lr) * weight_decay);
  const float a1 = 1.0f - beta1;
  const float a2 = 1.0f - beta2;
  for (std::size_t i = 0; i < n; ++i) {
    const float g = grad[i];
    // PyTorch updates m with lerp (m + (1-b1)(g-m)); same value as b1*m + (1-b1)*g up to
    // rounding, and matching its rounding keeps comparisons against PyTorch tight.
    const float mi = m[i] + a1 * (g - m[i]);
    const float vi = beta2 * v[i] + a2 * g * g;
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) / bias2_sqrt + eps;
    param[i] = param[i] * decay - step_size * mi / denom;
  }
}

}  // namespace hearsay::cpu
