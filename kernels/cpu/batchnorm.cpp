#include "kernels/cpu/batchnorm.hpp"

#include <algorithm>

namespace hearsay::cpu {

namespace {

// The pixels of channel c of image i.
inline const float* plane(const BatchNormShape& s, const float* x, long i, int c) {
  return x + (i * s.channels + c) * s.pixels;
}

}  // namespace

void batchnorm_moments(const BatchNormShape& s, const float* x, float* mean, float* variance) {
  const double count = static_cast<double>(s.per_channel());
  for (int c = 0; c < s.channels; ++c) {
    double sum = 0;
    for (long i = 0; i < s.n; ++i) {
      const float* p = plane(s, x, i, c);
      float part = 0;
      for (long k = 0; k < s.pixels; ++k) part += p[k];
      sum += part;
    }
    const double mu = count > 0 ? sum / count : 0.0;
    const float m = static_cast<float>(mu);
    double squares = 0;
    for (long i = 0; i < s.n; ++i) {
      const float* p = plane(s, x, i, c);
      float part = 0;
      for (long k = 0; k < s.pixels; ++k) part += (p[k] - m) * (p[k] - m);
      squares += part;
    }
    mean[c] = m;
    variance[c] = count > 0 ? static_cast<float>(squares / count) : 0.0f;
  }
}

void batchnorm_apply(const BatchNormShape& s, const float* x, const float* scale, const float* shift,
                     bool relu, float* y) {
  for (long i = 0; i < s.n; ++i)
    for (int c = 0; c < s.channels; ++c) {
      const float* p = plane(s, x, i, c);
      float* q = y + (i * s.channels + c) * s.pixels;
      const float a = scale[c], b = shift[c];
      if (relu)
        for (long k = 0; k < s.pixels; ++k) q[k] = std::max(0.0f, p[k] * a + b);
      else
        for (long k = 0; k < s.pixels; ++k) q[k] = p[k] * a + b;
    }
}

void batchnorm_param_grads(const BatchNormShape& s, const float* x, const float* dy, const float* mean,
                           const float* invstd, float* dgamma, float* dbeta) {
  for (int c = 0; c < s.channels; ++c) {
    double sum_dy = 0, sum_dy_xc = 0;
    const float m = mean[c];
    for (long i = 0; i < s.n; ++i) {
      const float* p = plane(s, x, i, c);
      const float* d = plane(s, dy, i, c);
      float a = 0, b = 0;
      for (long k = 0; k < s.pixels; ++k) {
        a += d[k];
        b += d[k] * (p[k] - m);
      }
      sum_dy += a;
      sum_dy_xc += b;
    }
    dbeta[c] = static_cast<float>(sum_dy);
    dgamma[c] = static_cast<float>(sum_dy_xc * invstd[c]);
  }
}

void batchnorm_input_grad_train(const BatchNormShape& s, const float* x, const float* dy, const float* mean,
                                const float* invstd, const float* gamma, const float* dgamma,
                                const float* dbeta, float* dx) {
  const float inv_count = 1.0f / static_cast<float>(std::max(1L, s.per_channel()));
  for (int c = 0; c < s.channels; ++c) {
    const float k = gamma[c] * invstd[c];
    const float mean_dy = dbeta[c] * inv_count;
    // xhat * dgamma / M = (x - mean) * invstd * dgamma / M
    const float xc_coef = invstd[c] * dgamma[c] * inv_count;
    const float m = mean[c];
    for (long i = 0; i < s.n; ++i) {
      const float* p = plane(s, x, i, c);
      const float* d = plane(s, dy, i, c);
      float* out = dx + (i * s.channels + c) * s.pixels;
      for (long j = 0; j < s.pixels; ++j) out[j] = k * (d[j] - mean_dy - (p[j] - m) * xc_coef);
    }
  }
}

}  // namespace hearsay::cpu
