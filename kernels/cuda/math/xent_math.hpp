// Per-row arithmetic of the fused softmax + cross-entropy kernel
// (kernels/cuda/softmax_xent.cu), shared with the host tests that sweep it against
// kernels/cpu/softmax_xent.cpp. The formula is cpu::softmax_xent's, step for step: max
// subtracted in fp32, exp and log in double. On the host it is the same computation
// (bit-identical); on the device exp and log come from CUDA's libdevice (within 1-2 ulp
// of glibc in double), so the device tests bound the difference.
#pragma once
#include <math.h>  // ::exp and ::log (double), which device code can call too

#include <cstdint>

#include "kernels/cuda/host_device.hpp"

namespace hearsay::cuda {

struct XentRow {
  double loss;  // -log softmax(z)[label]
  int correct;  // 1 when argmax(z) (the first maximum) == label
};

// One row of logits z[0..classes): the loss and whether the prediction is right, and
// when d is not null, d[c] = (softmax(z)[c] - [c == label]) * grad_scale.
// label must be < classes (a caller bug otherwise: z[label] is read out of the row).
HEARSAY_HD inline XentRow xent_row(int classes, const float* z, int label, float grad_scale, float* d) {
  int arg = 0;
  for (int c = 1; c < classes; ++c)
    if (z[c] > z[arg]) arg = c;
  const float zmax = z[arg];
  double sum = 0.0;
  for (int c = 0; c < classes; ++c) sum += ::exp(static_cast<double>(z[c] - zmax));
  const double log_sum = ::log(sum);
  XentRow r{log_sum - static_cast<double>(z[label] - zmax), arg == label ? 1 : 0};
  if (d != nullptr) {
    for (int c = 0; c < classes; ++c) {
      const double p = ::exp(static_cast<double>(z[c] - zmax) - log_sum);
      d[c] = static_cast<float>((p - (c == label ? 1.0 : 0.0)) * grad_scale);
    }
  }
  return r;
}

}  // namespace hearsay::cuda
