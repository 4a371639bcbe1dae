// Per-element arithmetic of the activation and bias kernels (kernels/cuda/activation.cu),
// shared with the host tests that sweep it against kernels/cpu/activation.cpp. Each
// function is the exact expression kernels/cpu evaluates for one element, so results
// are bit-identical; the bias gradients sum in another order than kernels/cpu (in
// parallel), and their tests bound the difference.
#pragma once
#include <cstdint>

#include "kernels/cuda/host_device.hpp"

namespace hearsay::cuda {

HEARSAY_HD inline float relu(float v) { return v > 0.0f ? v : 0.0f; }

// dx for one element given the ReLU's output y: dy where y > 0, else 0.
HEARSAY_HD inline float relu_grad(float y, float dy) { return y > 0.0f ? dy : 0.0f; }

// y + b, then max(0, .) when relu is set (cpu::bias_rows / bias_cols).
HEARSAY_HD inline float bias_act(float y, float b, bool relu_on) {
  const float v = y + b;
  return relu_on ? relu(v) : v;
}

// The channel of flat element e of an NCHW tensor [batch x channels x pixels].
template <class Index>
HEARSAY_HD inline Index channel_of(Index e, Index pixels, Index channels) {
  return (e / pixels) % channels;
}

// Thread `lane` of `lanes`'s share of db[c] for dy [batch x channels x pixels]: the
// elements (n, p) of channel c whose flat position j = n*pixels + p within the channel is
// lane, lane + lanes, lane + 2*lanes, ..., summed in that order. (n, p) advances by a
// fixed step without a division per element.
HEARSAY_HD inline float bias_rows_partial(const float* dy, long batch, long channels, long pixels, long c,
                                          long lane, long lanes) {
  if (pixels <= 0 || batch <= 0) return 0.0f;
  const long step_n = lanes / pixels, step_p = lanes % pixels;
  long n = lane / pixels, p = lane % pixels;
  float s = 0.0f;
  while (n < batch) {
    s += dy[(n * channels + c) * pixels + p];
    n += step_n;
    p += step_p;
    if (p >= pixels) {
      p -= pixels;
      ++n;
    }
  }
  return s;
}

// Thread `lane` of `lanes`'s share of db[f] for dy [batch x features]: rows lane,
// lane + lanes, ... of column f, summed in that order.
HEARSAY_HD inline float bias_cols_partial(const float* dy, long batch, long features, long f, long lane,
                                          long lanes) {
  float s = 0.0f;
  for (long b = lane; b < batch; b += lanes) s += dy[b * features + f];
  return s;
}

}  // namespace hearsay::cuda
