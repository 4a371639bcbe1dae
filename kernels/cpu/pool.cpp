#include "kernels/cpu/pool.hpp"

#include <cstring>

#include "kernels/cpu/dispatch.hpp"

namespace hearsay::cpu {

HEARSAY_CLONES void avgpool_forward(const PoolGeometry& g, long planes, const float* x, float* y) {
  const int oh = g.out_h(), ow = g.out_w();
  const float inv = 1.0f / static_cast<float>(g.kernel * g.kernel);
  if (g.kernel == 2 && g.stride == 2) {
    // The common case (LeNet): sum two input rows, then pairs.
    for (long p = 0; p < planes; ++p) {
      const float* in = x + p * g.height * g.width;
      float* out = y + p * oh * ow;
      for (int oy = 0; oy < oh; ++oy) {
        const float* r0 = in + (2 * oy) * g.width;
        const float* r1 = r0 + g.width;
        for (int ox = 0; ox < ow; ++ox)
          out[oy * ow + ox] = (r0[2 * ox] + r0[2 * ox + 1] + r1[2 * ox] + r1[2 * ox + 1]) * inv;
      }
    }
    return;
  }
  for (long p = 0; p < planes; ++p) {
    const float* in = x + p * g.height * g.width;
    float* out = y + p * oh * ow;
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox) {
        float s = 0.0f;
        for (int i = 0; i < g.kernel; ++i)
          for (int j = 0; j < g.kernel; ++j) s += in[(oy * g.stride + i) * g.width + ox * g.stride + j];
        out[oy * ow + ox] = s * inv;
      }
  }
}

HEARSAY_CLONES void avgpool_backward(const PoolGeometry& g, long planes, const float* dy, float* dx,
                                     const float* relu_output) {
  const int oh = g.out_h(), ow = g.out_w();
  const float inv = 1.0f / static_cast<float>(g.kernel * g.kernel);
  if (g.kernel == 2 && g.stride == 2) {
    for (long p = 0; p < planes; ++p) {
      const float* d = dy + p * oh * ow;
      float* out = dx + p * g.height * g.width;
      const float* mask = relu_output ? relu_output + p * g.height * g.width : nullptr;
      for (int oy = 0; oy < oh; ++oy) {
        float* r0 = out + (2 * oy) * g.width;
        float* r1 = r0 + g.width;
        if (mask) {
          const float* m0 = mask + (2 * oy) * g.width;
          const float* m1 = m0 + g.width;
          for (int ox = 0; ox < ow; ++ox) {
            const float v = d[oy * ow + ox] * inv;
            r0[2 * ox] = m0[2 * ox] > 0.0f ? v : 0.0f;
            r0[2 * ox + 1] = m0[2 * ox + 1] > 0.0f ? v : 0.0f;
            r1[2 * ox] = m1[2 * ox] > 0.0f ? v : 0.0f;
            r1[2 * ox + 1] = m1[2 * ox + 1] > 0.0f ? v : 0.0f;
          }
        } else {
          for (int ox = 0; ox < ow; ++ox) {
            const float v = d[oy * ow + ox] * inv;
            r0[2 * ox] = v;
            r0[2 * ox + 1] = v;
            r1[2 * ox] = v;
            r1[2 * ox + 1] = v;
          }
        }
        // A last column past the last full window (odd width) gets no gradient.
        for (int x = 2 * ow; x < g.width; ++x) r0[x] = r1[x] = 0.0f;
      }
      // Likewise a last row (odd height); only the leftovers are cleared, not the plane.
      for (int y = 2 * oh; y < g.height; ++y) std::memset(out + y * g.width, 0, sizeof(float) * g.width);
    }
    return;
  }
  for (long p = 0; p < planes; ++p) {
    const float* d = dy + p * oh * ow;
    float* out = dx + p * g.height * g.width;
    std::memset(out, 0, sizeof(float) * g.height * g.width);
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox) {
        const float v = d[oy * ow + ox] * inv;
        for (int i = 0; i < g.kernel; ++i)
          for (int j = 0; j < g.kernel; ++j) out[(oy * g.stride + i) * g.width + ox * g.stride + j] += v;
      }
    if (relu_output) {
      const float* mask = relu_output + p * g.height * g.width;
      for (long i = 0; i < static_cast<long>(g.height) * g.width; ++i) out[i] = mask[i] > 0.0f ? out[i] : 0.0f;
    }
  }
}

void maxpool_forward(const PoolGeometry& g, long planes, const float* x, float* y) {
  const int oh = g.out_h(), ow = g.out_w();
  for (long p = 0; p < planes; ++p) {
    const float* in = x + p * g.height * g.width;
    float* out = y + p * oh * ow;
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox) {
        const float* w = in + (oy * g.stride) * g.width + ox * g.stride;
        float m = w[0];
        for (int i = 0; i < g.kernel; ++i)
          for (int j = 0; j < g.kernel; ++j) m = w[i * g.width + j] > m ? w[i * g.width + j] : m;
        out[oy * ow + ox] = m;
      }
  }
}

void maxpool_backward(const PoolGeometry& g, long planes, const float* x, const float* dy, float* dx) {
  const int oh = g.out_h(), ow = g.out_w();
  for (long p = 0; p < planes; ++p) {
    const float* in = x + p * g.height * g.width;
    const float* d = dy + p * oh * ow;
    float* out = dx + p * g.height * g.width;
    std::memset(out, 0, sizeof(float) * g.height * g.width);
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox) {
        const long base = static_cast<long>(oy * g.stride) * g.width + ox * g.stride;
        long best = base;
        for (int i = 0; i < g.kernel; ++i)
          for (int j = 0; j < g.kernel; ++j) {
            const long at = base + static_cast<long>(i) * g.width + j;
            if (in[at] > in[best]) best = at;
          }
        out[best] += d[oy * ow + ox];
      }
  }
}

}  // namespace hearsay::cpu
