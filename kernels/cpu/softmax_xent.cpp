#include "kernels/cpu/softmax_xent.hpp"

#include <cmath>

namespace hearsay::cpu {

XentResult softmax_xent(long batch, int classes, const float* logits, const std::uint8_t* labels,
                        float grad_scale, float* dlogits) {
  XentResult r;
  for (long i = 0; i < batch; ++i) {
    const float* z = logits + i * classes;
    int arg = 0;
    for (int c = 1; c < classes; ++c)
      if (z[c] > z[arg]) arg = c;
    const float zmax = z[arg];
    double sum = 0.0;
    for (int c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(z[c] - zmax));
    const double log_sum = std::log(sum);
    const int label = labels[i];
    r.loss_sum += log_sum - static_cast<double>(z[label] - zmax);
    r.correct += arg == label;
    if (dlogits) {
      float* d = dlogits + i * classes;
      for (int c = 0; c < classes; ++c) {
        const double p = std::exp(static_cast<double>(z[c] - zmax) - log_sum);
        d[c] = static_cast<float>((p - (c == label ? 1.0 : 0.0)) * grad_scale);
      }
    }
  }
  return r;
}

}  // namespace hearsay::cpu
