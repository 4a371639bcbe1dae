#include "kernels/cpu/pool.hpp"

#include <cstring>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/intrinsics.hpp"

namespace hearsay::cpu {

namespace {

#if HEARSAY_HAVE_AVX512_PATH
inline __mmask16 first_lanes(int n) { return static_cast<__mmask16>(lane_mask(0, n)); }

// 2x2, stride 2, rows of at most 32 (LeNet: 26 and 9). The vectoriser handles the
// stride-2 pattern with scalar code; here a whole image row pair is two masked vector
// loads each, and the even/odd columns are separated with one two-source permute.
__attribute__((target("avx512f"))) void avgpool2_forward_avx512(const PoolGeometry& g, long planes,
                                                                const float* x, float* y) {
  const int width = g.width, oh = g.out_h(), ow = g.out_w();
  const long plane_size = static_cast<long>(g.height) * width;
  const __mmask16 lo_mask = first_lanes(width), hi_mask = first_lanes(width - 16), out_mask = first_lanes(ow);
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const __m512 quarter = _mm512_set1_ps(0.25f);
  for (long p = 0; p < planes; ++p) {
    const float* in = x + p * plane_size;
    float* out = y + p * oh * ow;
    for (int oy = 0; oy < oh; ++oy, out += ow) {
      const float* r0 = in + 2L * oy * width;
      const float* r1 = r0 + width;
      const __m512 lo = _mm512_add_ps(_mm512_maskz_loadu_ps(lo_mask, r0), _mm512_maskz_loadu_ps(lo_mask, r1));
      __m512 hi = _mm512_setzero_ps();
      if (width > 16)
        hi = _mm512_add_ps(_mm512_maskz_loadu_ps(hi_mask, r0 + 16), _mm512_maskz_loadu_ps(hi_mask, r1 + 16));
      const __m512 sum =
          _mm512_add_ps(_mm512_permutex2var_ps(lo, even, hi), _mm512_permutex2var_ps(lo, odd, hi));
      _mm512_mask_storeu_ps(out, out_mask, _mm512_mul_ps(sum, quarter));
    }
  }
}

// Backward of the above for outputs at most 16 wide: each gradient is spread to its
// two columns with one lane permute per half row, the fused ReLU mask becomes a
// compare mask, and lanes past the last full window are stored as zeros.
__attribute__((target("avx512f"))) void avgpool2_backward_avx512(const PoolGeometry& g, long planes,
                                                                 const float* dy, float* dx,
                                                                 const float* relu_output) {
  const int width = g.width, oh = g.out_h(), ow = g.out_w();
  const long plane_size = static_cast<long>(g.height) * width;
  const __mmask16 lo_mask = first_lanes(width), hi_mask = first_lanes(width - 16);
  const __mmask16 lo_valid = first_lanes(2 * ow), hi_valid = first_lanes(2 * ow - 16),
                  in_mask = first_lanes(ow);
  const __m512i dup_lo = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  const __m512i dup_hi = _mm512_add_epi32(dup_lo, _mm512_set1_epi32(8));
  const __m512 quarter = _mm512_set1_ps(0.25f), zero = _mm512_setzero_ps();
  for (long p = 0; p < planes; ++p) {
    const float* d = dy + p * oh * ow;
    float* out = dx + p * plane_size;
    const float* mask = relu_output ? relu_output + p * plane_size : nullptr;
    for (int oy = 0; oy < oh; ++oy, d += ow) {
      const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(in_mask, d), quarter);
      const __m512 lo = _mm512_permutexvar_ps(dup_lo, v), hi = _mm512_permutexvar_ps(dup_hi, v);
      for (int r = 0; r < 2; ++r) {
        const long row = (2L * oy + r) * width;
        __mmask16 keep_lo = lo_valid, keep_hi = hi_valid;
        if (mask) {
          keep_lo &= _mm512_cmp_ps_mask(_mm512_maskz_loadu_ps(lo_mask, mask + row), zero, _CMP_GT_OQ);
          if (width > 16)
            keep_hi &= _mm512_cmp_ps_mask(_mm512_maskz_loadu_ps(hi_mask, mask + row + 16), zero, _CMP_GT_OQ);
        }
        _mm512_mask_storeu_ps(out + row, lo_mask, _mm512_maskz_mov_ps(keep_lo, lo));
        if (width > 16) _mm512_mask_storeu_ps(out + row + 16, hi_mask, _mm512_maskz_mov_ps(keep_hi, hi));
      }
    }
    // A last row past the last full window (odd height) gets no gradient.
    for (int yy = 2 * oh; yy < g.height; ++yy) std::memset(out + yy * width, 0, sizeof(float) * width);
  }
}

#endif

bool avgpool2_fast_path(const PoolGeometry& g) {
#if HEARSAY_HAVE_AVX512_PATH
  return g.kernel == 2 && g.stride == 2 && g.width <= 32 && has_avx512();
#else
  (void)g;
  return false;
#endif
}

}  // namespace

HEARSAY_CLONES void avgpool_forward(const PoolGeometry& g, long planes, const float* x, float* y) {
#if HEARSAY_HAVE_AVX512_PATH
  if (avgpool2_fast_path(g)) return avgpool2_forward_avx512(g, planes, x, y);
#endif
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
#if HEARSAY_HAVE_AVX512_PATH
  if (avgpool2_fast_path(g)) return avgpool2_backward_avx512(g, planes, dy, dx, relu_output);
#endif
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
      for (long i = 0; i < static_cast<long>(g.height) * g.width; ++i)
        out[i] = mask[i] > 0.0f ? out[i] : 0.0f;
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
