// Per-output-element arithmetic of the pooling kernels (kernels/cuda/pool.cu), shared
// with the host tests that sweep it against kernels/cpu/pool.cpp. Planes are H x W, the
// window k x k with stride s and no padding, as in cpu::PoolGeometry.
//
// The backward passes are written in gather form: each input pixel visits the windows
// that cover it and sums their contributions, so one thread owns each dx element and no
// atomics are needed. The windows are visited in the order kernels/cpu scatters them
// (output row, then column, ascending), starting from 0, so the sums round exactly as
// kernels/cpu's do.
#pragma once

#include "kernels/cuda/host_device.hpp"

namespace hearsay::cuda {

// cpu::PoolGeometry with the output size precomputed; plain data for kernel arguments.
struct PoolDims {
  int height, width, kernel, stride;
  int out_h, out_w;
};

HEARSAY_HD inline PoolDims pool_dims(int height, int width, int kernel, int stride) {
  return PoolDims{
      height, width, kernel, stride, (height - kernel) / stride + 1, (width - kernel) / stride + 1};
}

// The first and last window (inclusive, along one axis) that covers input position i;
// first > last when none does (positions past the last full window).
struct WindowRange {
  int first, last;
};
HEARSAY_HD inline WindowRange windows_covering(int i, int kernel, int stride, int out) {
  // Window o covers o*stride .. o*stride + kernel - 1.
  const int first = i < kernel ? 0 : (i - kernel) / stride + 1;
  const int by_start = i / stride;
  const int last = by_start < out - 1 ? by_start : out - 1;
  return WindowRange{first, last};
}

// Output (oy, ox) of an average pool over one plane: the window's sum in row-major order,
// times 1/k^2 (cpu::avgpool_forward's generic loop).
HEARSAY_HD inline float avgpool_forward_at(const PoolDims& d, const float* plane, int oy, int ox) {
  const float inv = 1.0f / static_cast<float>(d.kernel * d.kernel);
  const float* w = plane + static_cast<long>(oy * d.stride) * d.width + ox * d.stride;
  float s = 0.0f;
  for (int i = 0; i < d.kernel; ++i)
    for (int j = 0; j < d.kernel; ++j) s = add_rn(s, w[static_cast<long>(i) * d.width + j]);
  return mul_rn(s, inv);
}

// dx at input (iy, ix) of one plane: the sum of dy * 1/k^2 over the windows that cover
// it, zeroed where relu_plane (the ReLU output feeding the pool; may be null) is <= 0.
HEARSAY_HD inline float avgpool_backward_at(const PoolDims& d, const float* dy_plane, const float* relu_plane,
                                            int iy, int ix) {
  const float inv = 1.0f / static_cast<float>(d.kernel * d.kernel);
  const WindowRange rows = windows_covering(iy, d.kernel, d.stride, d.out_h);
  const WindowRange cols = windows_covering(ix, d.kernel, d.stride, d.out_w);
  float s = 0.0f;
  for (int oy = rows.first; oy <= rows.last; ++oy)
    for (int ox = cols.first; ox <= cols.last; ++ox)
      s = add_rn(s, mul_rn(dy_plane[static_cast<long>(oy) * d.out_w + ox], inv));
  if (relu_plane != nullptr && !(relu_plane[static_cast<long>(iy) * d.width + ix] > 0.0f)) return 0.0f;
  return s;
}

// Offset within the plane of the first maximum of window (oy, ox), comparing as
// cpu::maxpool_backward does (a later element wins only when strictly greater).
HEARSAY_HD inline long maxpool_argmax(const PoolDims& d, const float* plane, int oy, int ox) {
  const long base = static_cast<long>(oy * d.stride) * d.width + ox * d.stride;
  long best = base;
  for (int i = 0; i < d.kernel; ++i)
    for (int j = 0; j < d.kernel; ++j) {
      const long at = base + static_cast<long>(i) * d.width + j;
      if (plane[at] > plane[best]) best = at;
    }
  return best;
}

// Output (oy, ox) of a max pool over one plane (cpu::maxpool_forward's loop, including
// how NaN propagates: a comparison with NaN is false, so the running max keeps its value).
HEARSAY_HD inline float maxpool_forward_at(const PoolDims& d, const float* plane, int oy, int ox) {
  const float* w = plane + static_cast<long>(oy * d.stride) * d.width + ox * d.stride;
  float m = w[0];
  for (int i = 0; i < d.kernel; ++i)
    for (int j = 0; j < d.kernel; ++j) {
      const float v = w[static_cast<long>(i) * d.width + j];
      m = v > m ? v : m;
    }
  return m;
}

// dx at input (iy, ix) of one plane: the sum of dy over the covering windows whose first
// maximum is this pixel.
HEARSAY_HD inline float maxpool_backward_at(const PoolDims& d, const float* x_plane, const float* dy_plane,
                                            int iy, int ix) {
  const long self = static_cast<long>(iy) * d.width + ix;
  const WindowRange rows = windows_covering(iy, d.kernel, d.stride, d.out_h);
  const WindowRange cols = windows_covering(ix, d.kernel, d.stride, d.out_w);
  float s = 0.0f;
  for (int oy = rows.first; oy <= rows.last; ++oy)
    for (int ox = cols.first; ox <= cols.last; ++ox)
      if (maxpool_argmax(d, x_plane, oy, ox) == self)
        s = add_rn(s, dy_plane[static_cast<long>(oy) * d.out_w + ox]);
  return s;
}

}  // namespace hearsay::cuda
