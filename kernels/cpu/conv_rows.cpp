// im2row / row2im: the pixel-major layout of the convolution's column matrix.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/conv.hpp"
#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/intrinsics.hpp"

namespace hearsay::cpu {

namespace {

// Row p = (oy, ox) holds image[c][oy*stride - pad + ki][ox*stride - pad + kj] at column
// (c, ki, kj), or 0 outside the image.
void im2row_generic(const ConvGeometry& g, const float* image, float* rows) {
  const int oh = g.out_h(), ow = g.out_w();
  for (int oy = 0; oy < oh; ++oy) {
    for (int ox = 0; ox < ow; ++ox) {
      for (int c = 0; c < g.channels; ++c) {
        const float* plane = image + static_cast<long>(c) * g.height * g.width;
        for (int ki = 0; ki < g.kernel_h; ++ki) {
          const int iy = oy * g.stride - g.padding + ki;
          for (int kj = 0; kj < g.kernel_w; ++kj) {
            const int ix = ox * g.stride - g.padding + kj;
            const bool inside = iy >= 0 && iy < g.height && ix >= 0 && ix < g.width;
            *rows++ = inside ? plane[static_cast<long>(iy) * g.width + ix] : 0.0f;
          }
        }
      }
    }
  }
}

void row2im_generic(const ConvGeometry& g, const float* rows, float* image) {
  const int oh = g.out_h(), ow = g.out_w();
  std::memset(image, 0, sizeof(float) * g.channels * g.height * g.width);
  for (int oy = 0; oy < oh; ++oy) {
    for (int ox = 0; ox < ow; ++ox) {
      for (int c = 0; c < g.channels; ++c) {
        float* plane = image + static_cast<long>(c) * g.height * g.width;
        for (int ki = 0; ki < g.kernel_h; ++ki) {
          const int iy = oy * g.stride - g.padding + ki;
          for (int kj = 0; kj < g.kernel_w; ++kj, ++rows) {
            const int ix = ox * g.stride - g.padding + kj;
            if (iy >= 0 && iy < g.height && ix >= 0 && ix < g.width)
              plane[static_cast<long>(iy) * g.width + ix] += *rows;
          }
        }
      }
    }
  }
}

#if HEARSAY_HAVE_AVX512_PATH
// A masked load whose base may lie before the buffer: only the lanes in `mask` are read,
// and AVX-512 suppresses faults on the others. The address is formed as an integer so no
// out-of-range pointer arithmetic happens in C++.
__attribute__((target("avx512f,avx512vl"), always_inline)) inline __m256 load_lanes8(__mmask8 mask,
                                                                                     const float* p,
                                                                                     long offset) {
  const auto address = reinterpret_cast<std::uintptr_t>(p) + static_cast<std::uintptr_t>(offset * 4);
  return _mm256_maskz_loadu_ps(mask, reinterpret_cast<const void*>(address));
}
__attribute__((target("avx512f,avx512vl"), always_inline)) inline void store_lanes8(__mmask8 mask, float* p,
                                                                                    long offset, __m256 v) {
  const auto address = reinterpret_cast<std::uintptr_t>(p) + static_cast<std::uintptr_t>(offset * 4);
  _mm256_mask_storeu_ps(reinterpret_cast<void*>(address), mask, v);
}

// Stride 1, kernel rows of at most 8 pixels (LeNet: 3 and 5): each (pixel, channel,
// kernel row) is one masked 8-lane load of KW image pixels (out-of-image lanes read as
// 0) and one masked store; 256-bit masked moves run faster here than 512-bit ones.
__attribute__((target("avx512f,avx512vl"))) void im2row_stride1_avx512(const ConvGeometry& geo,
                                                                       const float* image, float* rows) {
  const ConvGeometry g = geo;
  const int oh = g.out_h(), ow = g.out_w(), kw = g.kernel_w;
  const long plane_size = static_cast<long>(g.height) * g.width;
  const __mmask8 store_mask = static_cast<__mmask8>(lane_mask(0, kw));
  const __m256 zero = _mm256_setzero_ps();
  for (int oy = 0; oy < oh; ++oy) {
    for (int ox = 0; ox < ow; ++ox) {
      const int x0 = ox - g.padding;  // image column of kernel column 0
      const __mmask8 load_mask =
          static_cast<__mmask8>(lane_mask(std::max(0, -x0), std::min(kw, g.width - x0)));
      for (int c = 0; c < g.channels; ++c) {
        const float* plane = image + c * plane_size;
        for (int ki = 0; ki < g.kernel_h; ++ki, rows += kw) {
          const int iy = oy - g.padding + ki;
          if (iy < 0 || iy >= g.height) {
            _mm256_mask_storeu_ps(rows, store_mask, zero);
            continue;
          }
          _mm256_mask_storeu_ps(rows, store_mask,
                                load_lanes8(load_mask, plane, static_cast<long>(iy) * g.width + x0));
        }
      }
    }
  }
}

// Stride 1, kernel rows of at most 8 pixels: R is read once, in order, and each
// (pixel, channel, kernel row) segment is added into its image row with masked 8-lane
// moves. Windows of neighbouring pixels overlap, but the next write to the same image
// row comes channels x kernel rows segments later, by when the earlier store has left
// the store buffer, so the reload does not stall on store forwarding.
__attribute__((target("avx512f,avx512vl"))) void row2im_stride1_avx512(const ConvGeometry& geo,
                                                                       const float* rows, float* image) {
  const ConvGeometry g = geo;
  const int oh = g.out_h(), ow = g.out_w(), kw = g.kernel_w;
  const long plane_size = static_cast<long>(g.height) * g.width;
  std::memset(image, 0, sizeof(float) * g.channels * plane_size);
  for (int oy = 0; oy < oh; ++oy) {
    for (int ox = 0; ox < ow; ++ox) {
      const int x0 = ox - g.padding;
      const int lo = std::max(0, -x0), hi = std::min(kw, g.width - x0);
      const __mmask8 mask = static_cast<__mmask8>(lane_mask(lo, hi));
      for (int c = 0; c < g.channels; ++c) {
        float* plane = image + c * plane_size;
        for (int ki = 0; ki < g.kernel_h; ++ki, rows += kw) {
          const int iy = oy - g.padding + ki;
          if (iy < 0 || iy >= g.height) continue;
          const long at = static_cast<long>(iy) * g.width + x0;
          const __m256 sum = _mm256_add_ps(load_lanes8(mask, plane, at), _mm256_maskz_loadu_ps(mask, rows));
          store_lanes8(mask, plane, at, sum);
        }
      }
    }
  }
}

#endif

}  // namespace

void im2row(const ConvGeometry& g, const float* image, float* rows) {
#if HEARSAY_HAVE_AVX512_PATH
  if (g.stride == 1 && g.kernel_w <= 8 && has_avx512()) return im2row_stride1_avx512(g, image, rows);
#endif
  im2row_generic(g, image, rows);
}

void row2im(const ConvGeometry& g, const float* rows, float* image) {
#if HEARSAY_HAVE_AVX512_PATH
  if (g.stride == 1 && g.kernel_w <= 8 && has_avx512()) return row2im_stride1_avx512(g, rows, image);
#endif
  row2im_generic(g, rows, image);
}

}  // namespace hearsay::cpu
