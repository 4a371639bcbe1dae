// Per-element arithmetic of the fused optimizer kernels (kernels/cuda/optim.cu), shared
// with the host tests that sweep it against kernels/cpu/optim.cpp. Every expression is
// cpu::sgd_update's or cpu::adamw_update's in the same order, with the products and sums
// as unfused single roundings (mul_rn, add_rn), so device and host results are
// bit-identical: a peer on a GPU takes exactly the step a CPU peer would.
#pragma once
#include <math.h>  // ::sqrtf, correctly rounded on the device too (nvcc's default -prec-sqrt=true)

#include <cmath>
#include <cstdint>

#include "kernels/cuda/host_device.hpp"

namespace hearsay::cuda {

struct SgdConfig {
  float lr, momentum, dampening, weight_decay;
  bool nesterov, first_step;
};

// One element of torch.optim.SGD as cpu::sgd_update computes it: returns the new
// parameter and, when momentum != 0, updates *buf (not read on the first step).
HEARSAY_HD inline float sgd_element(float param, float grad, float* buf, const SgdConfig& c) {
  const float g = add_rn(grad, mul_rn(c.weight_decay, param));
  if (c.momentum == 0.0f) return sub_rn(param, mul_rn(c.lr, g));
  if (c.first_step) {
    *buf = g;
    return sub_rn(param, mul_rn(c.lr, c.nesterov ? add_rn(g, mul_rn(c.momentum, g)) : g));
  }
  const float keep = 1.0f - c.dampening;
  const float b = add_rn(mul_rn(c.momentum, *buf), mul_rn(keep, g));
  *buf = b;
  return sub_rn(param, mul_rn(c.lr, c.nesterov ? add_rn(g, mul_rn(c.momentum, b)) : b));
}

// The fp32 scalars of one AdamW step, computed once on the host exactly as
// cpu::adamw_update does (bias corrections in double, then rounded). step >= 1.
struct AdamwScalars {
  float step_size, bias2_sqrt, decay, a1, a2, beta2, eps;
};

inline AdamwScalars adamw_scalars(float lr, float beta1, float beta2, float eps, float weight_decay,
                                  std::int64_t step) {
  const double t = static_cast<double>(step);
  const double bias1 = 1.0 - std::pow(static_cast<double>(beta1), t);
  const double bias2 = 1.0 - std::pow(static_cast<double>(beta2), t);
  AdamwScalars s;
  s.step_size = static_cast<float>(static_cast<double>(lr) / bias1);
  s.bias2_sqrt = static_cast<float>(std::sqrt(bias2));
  s.decay = static_cast<float>(1.0 - static_cast<double>(lr) * weight_decay);
  s.a1 = 1.0f - beta1;
  s.a2 = 1.0f - beta2;
  s.beta2 = beta2;
  s.eps = eps;
  return s;
}

struct AdamwState {
  float param, m, v;
};

// One element of torch.optim.AdamW as cpu::adamw_update computes it.
HEARSAY_HD inline AdamwState adamw_element(AdamwState s, float g, const AdamwScalars& c) {
  const float mi = add_rn(s.m, mul_rn(c.a1, sub_rn(g, s.m)));
  const float vi = add_rn(mul_rn(c.beta2, s.v), mul_rn(mul_rn(c.a2, g), g));
  const float denom = add_rn(::sqrtf(vi) / c.bias2_sqrt, c.eps);
  const float p = sub_rn(mul_rn(s.param, c.decay), mul_rn(c.step_size, mi) / denom);
  return AdamwState{p, mi, vi};
}

}  // namespace hearsay::cuda
