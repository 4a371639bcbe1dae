// Straightforward double-precision implementations of every layer, written from the
// definitions with no shared code, used as the reference for gradient checks.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

namespace hearsay::reference {

using Vec = std::vector<double>;

// x [n, in] -> y [n, out]; p = W [out, in] then b [out].
inline Vec linear(const Vec& p, const Vec& x, int n, int in, int out) {
  Vec y(static_cast<std::size_t>(n) * out);
  for (int i = 0; i < n; ++i)
    for (int o = 0; o < out; ++o) {
      double s = p[static_cast<std::size_t>(out) * in + o];
      for (int k = 0; k < in; ++k) s += p[static_cast<std::size_t>(o) * in + k] * x[static_cast<std::size_t>(i) * in + k];
      y[static_cast<std::size_t>(i) * out + o] = s;
    }
  return y;
}

// x [n, c, h, w] -> y [n, oc, oh, ow]; p = W [oc, c, k, k] then b [oc].
inline Vec conv2d(const Vec& p, const Vec& x, int n, int c, int h, int w, int oc, int k, int stride, int pad) {
  const int oh = (h + 2 * pad - k) / stride + 1, ow = (w + 2 * pad - k) / stride + 1;
  Vec y(static_cast<std::size_t>(n) * oc * oh * ow);
  const std::size_t nw = static_cast<std::size_t>(oc) * c * k * k;
  for (int b = 0; b < n; ++b)
    for (int o = 0; o < oc; ++o)
      for (int yy = 0; yy < oh; ++yy)
        for (int xx = 0; xx < ow; ++xx) {
          double s = p[nw + static_cast<std::size_t>(o)];
          for (int ci = 0; ci < c; ++ci)
            for (int i = 0; i < k; ++i)
              for (int j = 0; j < k; ++j) {
                const int iy = yy * stride - pad + i, ix = xx * stride - pad + j;
                if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                s += p[((static_cast<std::size_t>(o) * c + ci) * k + i) * k + j] *
                     x[((static_cast<std::size_t>(b) * c + ci) * h + iy) * w + ix];
              }
          y[((static_cast<std::size_t>(b) * oc + o) * oh + yy) * ow + xx] = s;
        }
  return y;
}

// planes of h x w -> (h-k)/s+1 x (w-k)/s+1, average or max.
inline Vec pool(const Vec& x, int planes, int h, int w, int k, int s, bool max) {
  const int oh = (h - k) / s + 1, ow = (w - k) / s + 1;
  Vec y(static_cast<std::size_t>(planes) * oh * ow);
  for (int p = 0; p < planes; ++p)
    for (int yy = 0; yy < oh; ++yy)
      for (int xx = 0; xx < ow; ++xx) {
        double acc = max ? -INFINITY : 0.0;
        for (int i = 0; i < k; ++i)
          for (int j = 0; j < k; ++j) {
            const double v = x[(static_cast<std::size_t>(p) * h + yy * s + i) * w + xx * s + j];
            acc = max ? std::max(acc, v) : acc + v;
          }
        y[(static_cast<std::size_t>(p) * oh + yy) * ow + xx] = max ? acc : acc / (k * k);
      }
  return y;
}

inline Vec relu(const Vec& x) {
  Vec y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = x[i] > 0 ? x[i] : 0.0;
  return y;
}

// Mean softmax cross-entropy of logits [n, classes].
inline double cross_entropy(const Vec& z, const std::vector<std::uint8_t>& labels, int classes) {
  const int n = static_cast<int>(labels.size());
  double total = 0;
  for (int i = 0; i < n; ++i) {
    double m = -INFINITY;
    for (int c = 0; c < classes; ++c) m = std::max(m, z[static_cast<std::size_t>(i) * classes + c]);
    double s = 0;
    for (int c = 0; c < classes; ++c) s += std::exp(z[static_cast<std::size_t>(i) * classes + c] - m);
    total += std::log(s) + m - z[static_cast<std::size_t>(i) * classes + labels[static_cast<std::size_t>(i)]];
  }
  return total / n;
}

}  // namespace hearsay::reference
