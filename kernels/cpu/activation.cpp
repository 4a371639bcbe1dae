#include "kernels/cpu/activation.hpp"

#include "kernels/cpu/dispatch.hpp"

namespace hearsay::cpu {

HEARSAY_CLONES void relu_forward(long n, const float* x, float* y) {
  for (long i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

HEARSAY_CLONES void relu_backward(long n, const float* y, const float* dy, float* dx) {
  if (dx == dy) {
    // In place (the fused epilogues mask dy where it lies). A separate loop with one
    // written pointer: with dx and dy both in play, the vectoriser's overlap check
    // fails for aliased buffers and falls back to a branchy scalar loop.
    for (long i = 0; i < n; ++i) dx[i] = y[i] > 0.0f ? dx[i] : 0.0f;
    return;
  }
  for (long i = 0; i < n; ++i) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

HEARSAY_CLONES void bias_rows(int channels, long pixels, const float* bias, bool relu, float* y) {
  for (int c = 0; c < channels; ++c) {
    float* row = y + c * pixels;
    const float b = bias[c];
    if (relu) {
      for (long p = 0; p < pixels; ++p) {
        const float v = row[p] + b;
        row[p] = v > 0.0f ? v : 0.0f;
      }
    } else {
      for (long p = 0; p < pixels; ++p) row[p] += b;
    }
  }
}

HEARSAY_CLONES void bias_cols(long batch, int features, const float* bias, bool relu, float* y) {
  for (long i = 0; i < batch; ++i) {
    float* row = y + i * features;
    if (relu) {
      for (int f = 0; f < features; ++f) {
        const float v = row[f] + bias[f];
        row[f] = v > 0.0f ? v : 0.0f;
      }
    } else {
      for (int f = 0; f < features; ++f) row[f] += bias[f];
    }
  }
}

void bias_grad_rows(int channels, long pixels, const float* dy, bool accumulate, float* db) {
  for (int c = 0; c < channels; ++c) {
    const float* row = dy + c * pixels;
    // Eight independent partial sums in a fixed order: fast (no single dependency
    // chain) and still the same result on every CPU, unlike a vectoriser reduction.
    float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    long p = 0;
    for (; p + 8 <= pixels; p += 8)
      for (int j = 0; j < 8; ++j) part[j] += row[p + j];
    float s = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
    for (; p < pixels; ++p) s += row[p];
    db[c] = accumulate ? db[c] + s : s;
  }
}

HEARSAY_CLONES void bias_grad_cols(long batch, int features, const float* dy, float* db) {
  for (int f = 0; f < features; ++f) db[f] = 0.0f;
  for (long i = 0; i < batch; ++i)
    for (int f = 0; f < features; ++f) db[f] += dy[i * features + f];
}

}  // namespace hearsay::cpu
