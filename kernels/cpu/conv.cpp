#include "kernels/cpu/conv.hpp"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/intrinsics.hpp"

namespace hearsay::cpu {

namespace {

// Valid output-column range [begin, end) for kernel column kj: the input column
// ox*stride - pad + kj lies inside [0, width).
struct ColumnRange {
  int begin, end;
};
ColumnRange valid_columns(const ConvGeometry& g, int kj) {
  const int ow = g.out_w();
  int begin = 0, end = ow;
  while (begin < ow && begin * g.stride - g.padding + kj < 0) ++begin;
  while (end > begin && (end - 1) * g.stride - g.padding + kj >= g.width) --end;
  return {begin, end};
}

#if HEARSAY_HAVE_AVX512_PATH
constexpr int kNarrowMaxKernel = 16;

// Stride-1 im2col/col2im with AVX-512 masked loads and stores. LeNet's rows are 9 and
// 26 pixels wide: the vectoriser's loops spend more time in prologue and epilogue than
// copying, while a masked load/store moves a whole row of up to 16 in one instruction
// pair and writes the zero padding in the same store.
__attribute__((target("avx512f"))) void im2col_stride1_avx512(const ConvGeometry& geo, const float* image,
                                                              float* columns, long ld) {
  const ConvGeometry g = geo;  // locals: stores through float* must not force reloads
  const int oh = g.out_h(), ow = g.out_w(), chunks = (ow + 15) / 16;
  const long plane_size = static_cast<long>(g.height) * g.width;
  for (int c = 0; c < g.channels; ++c) {
    const float* plane = image + c * plane_size;
    for (int ki = 0; ki < g.kernel_h; ++ki) {
      // Output rows whose input row oy - pad + ki is inside the image.
      const int oy_begin = std::max(0, g.padding - ki), oy_end = std::min(oh, g.height + g.padding - ki);
      for (int kj = 0; kj < g.kernel_w; ++kj) {
        const auto [begin, end] = valid_columns(g, kj);
        const int shift = kj - g.padding;
        for (int chunk = 0; chunk < chunks; ++chunk) {
          const int x0 = chunk * 16, n = std::min(16, ow - x0);
          const __mmask16 store_mask = static_cast<__mmask16>((1u << n) - 1u);
          // Lanes whose input column is inside the image; masked-off lanes are never
          // read, so an out-of-row base address is safe.
          const int lo = std::max(begin - x0, 0), hi = std::min(end - x0, n);
          const __mmask16 load_mask = static_cast<__mmask16>(lane_mask(lo, hi));
          const __m512 zero = _mm512_setzero_ps();
          float* out = columns + x0;
          for (int oy = 0; oy < oy_begin; ++oy) _mm512_mask_storeu_ps(out + oy * ow, store_mask, zero);
          const float* in = plane + static_cast<long>(oy_begin - g.padding + ki) * g.width + x0 + shift;
          for (int oy = oy_begin; oy < oy_end; ++oy, in += g.width)
            _mm512_mask_storeu_ps(out + oy * ow, store_mask, _mm512_maskz_loadu_ps(load_mask, in));
          for (int oy = std::max(oy_end, oy_begin); oy < oh; ++oy)
            _mm512_mask_storeu_ps(out + oy * ow, store_mask, zero);
        }
        columns += ld;
      }
    }
  }
}

__attribute__((target("avx512f"))) void col2im_stride1_avx512(const ConvGeometry& geo, const float* columns,
                                                              long ld, float* image) {
  const ConvGeometry g = geo;
  const int oh = g.out_h(), ow = g.out_w();
  const long plane_size = static_cast<long>(g.height) * g.width;
  std::memset(image, 0, sizeof(float) * g.channels * plane_size);
  for (int c = 0; c < g.channels; ++c) {
    float* plane = image + c * plane_size;
    for (int ki = 0; ki < g.kernel_h; ++ki) {
      const int oy_begin = std::max(0, g.padding - ki), oy_end = std::min(oh, g.height + g.padding - ki);
      for (int kj = 0; kj < g.kernel_w; ++kj) {
        const auto [begin, end] = valid_columns(g, kj);
        const int shift = kj - g.padding;
        for (int x0 = begin; x0 < end; x0 += 16) {
          const __mmask16 mask = static_cast<__mmask16>((1u << std::min(16, end - x0)) - 1u);
          const float* in = columns + static_cast<long>(oy_begin) * ow + x0;
          float* row = plane + static_cast<long>(oy_begin - g.padding + ki) * g.width + x0 + shift;
          for (int oy = oy_begin; oy < oy_end; ++oy, in += ow, row += g.width) {
            const __m512 sum =
                _mm512_add_ps(_mm512_maskz_loadu_ps(mask, row), _mm512_maskz_loadu_ps(mask, in));
            _mm512_mask_storeu_ps(row, mask, sum);
          }
        }
        columns += ld;
      }
    }
  }
}

// col2im for images at most 16 pixels wide (LeNet's second convolution: 13 wide).
// Instead of scattering each column row into the image (every add a load-modify-store
// that overlaps the previous one, so store forwarding fails), each image row is summed
// in registers from the column rows that touch it, shifted into place with a lane
// permutation, and stored once. No memset, no read-back of the image.
__attribute__((target("avx512f"))) void col2im_stride1_narrow_avx512(const ConvGeometry& geo,
                                                                     const float* columns, long ld,
                                                                     float* image) {
  const ConvGeometry g = geo;
  const int oh = g.out_h(), ow = g.out_w();
  __m512i lane_source[kNarrowMaxKernel];
  __mmask16 lane_valid[kNarrowMaxKernel];
  for (int kj = 0; kj < g.kernel_w; ++kj) {
    alignas(64) int idx[16];
    unsigned mask = 0;
    for (int lane = 0; lane < 16; ++lane) {
      const int ox = lane + g.padding - kj;  // the output column that feeds this image column
      const bool ok = lane < g.width && ox >= 0 && ox < ow;
      idx[lane] = ok ? ox : 0;
      mask |= ok ? 1u << lane : 0u;
    }
    lane_source[kj] = _mm512_load_si512(idx);
    lane_valid[kj] = static_cast<__mmask16>(mask);
  }
  const __mmask16 load_mask = static_cast<__mmask16>((1u << ow) - 1u);
  const __mmask16 row_mask = static_cast<__mmask16>((1u << g.width) - 1u);
  for (int c = 0; c < g.channels; ++c) {
    const float* col_c = columns + static_cast<long>(c) * g.kernel_h * g.kernel_w * ld;
    float* plane = image + static_cast<long>(c) * g.height * g.width;
    for (int iy = 0; iy < g.height; ++iy) {
      __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();  // two chains hide add latency
      for (int ki = 0; ki < g.kernel_h; ++ki) {
        const int oy = iy + g.padding - ki;
        if (oy < 0 || oy >= oh) continue;
        const float* base = col_c + static_cast<long>(ki) * g.kernel_w * ld + static_cast<long>(oy) * ow;
        int kj = 0;
        for (; kj + 1 < g.kernel_w; kj += 2) {
          const __m512 v0 = _mm512_maskz_loadu_ps(load_mask, base + kj * ld);
          const __m512 v1 = _mm512_maskz_loadu_ps(load_mask, base + (kj + 1) * ld);
          acc0 = _mm512_add_ps(acc0, _mm512_maskz_permutexvar_ps(lane_valid[kj], lane_source[kj], v0));
          acc1 =
              _mm512_add_ps(acc1, _mm512_maskz_permutexvar_ps(lane_valid[kj + 1], lane_source[kj + 1], v1));
        }
        if (kj < g.kernel_w) {
          const __m512 v0 = _mm512_maskz_loadu_ps(load_mask, base + kj * ld);
          acc0 = _mm512_add_ps(acc0, _mm512_maskz_permutexvar_ps(lane_valid[kj], lane_source[kj], v0));
        }
      }
      _mm512_mask_storeu_ps(plane + static_cast<long>(iy) * g.width, row_mask, _mm512_add_ps(acc0, acc1));
    }
  }
}

#endif

void im2col_generic(const ConvGeometry& g, const float* image, float* columns, long ld);
void col2im_generic(const ConvGeometry& g, const float* columns, long ld, float* image);

}  // namespace

void im2col(const ConvGeometry& g, const float* image, float* columns, long ld) {
  if (ld == 0) ld = g.col_cols();
#if HEARSAY_HAVE_AVX512_PATH
  if (g.stride == 1 && has_avx512()) return im2col_stride1_avx512(g, image, columns, ld);
#endif
  im2col_generic(g, image, columns, ld);
}

void col2im(const ConvGeometry& g, const float* columns, long ld, float* image) {
  if (ld == 0) ld = g.col_cols();
#if HEARSAY_HAVE_AVX512_PATH
  if (g.stride == 1 && has_avx512()) {
    if (g.width <= 16 && g.out_w() <= 16 && g.kernel_w <= kNarrowMaxKernel)
      return col2im_stride1_narrow_avx512(g, columns, ld, image);
    return col2im_stride1_avx512(g, columns, ld, image);
  }
#endif
  col2im_generic(g, columns, ld, image);
}

namespace {

// Row r of the column matrix is (c, ki, kj); its entry for output pixel (oy, ox) is
// image[c][oy*stride - pad + ki][ox*stride - pad + kj], or 0 outside the image. The
// inner loop runs over ox with the valid range computed once, so it is a plain copy
// (stride 1) the vectoriser handles, with no per-pixel bounds test.
HEARSAY_CLONES void im2col_generic(const ConvGeometry& g, const float* image, float* columns, long ld) {
  const int oh = g.out_h(), ow = g.out_w();
  for (int c = 0; c < g.channels; ++c) {
    const float* plane = image + static_cast<long>(c) * g.height * g.width;
    for (int ki = 0; ki < g.kernel_h; ++ki) {
      for (int kj = 0; kj < g.kernel_w; ++kj) {
        // ox range whose input column ix = ox*stride - pad + kj lies in [0, width)
        const auto [ox_begin, ox_end] = valid_columns(g, kj);
        for (int oy = 0; oy < oh; ++oy) {
          float* out = columns + static_cast<long>(oy) * ow;
          const int iy = oy * g.stride - g.padding + ki;
          if (iy < 0 || iy >= g.height) {
            std::memset(out, 0, sizeof(float) * ow);
            continue;
          }
          const float* row = plane + static_cast<long>(iy) * g.width;
          const int shift = kj - g.padding;
          for (int ox = 0; ox < ox_begin; ++ox) out[ox] = 0.0f;
          if (g.stride == 1) {
            for (int ox = ox_begin; ox < ox_end; ++ox) out[ox] = row[ox + shift];
          } else {
            for (int ox = ox_begin; ox < ox_end; ++ox) out[ox] = row[ox * g.stride + shift];
          }
          for (int ox = ox_end; ox < ow; ++ox) out[ox] = 0.0f;
        }
        columns += ld;
      }
    }
  }
}

HEARSAY_CLONES void col2im_generic(const ConvGeometry& g, const float* columns, long ld, float* image) {
  const int oh = g.out_h(), ow = g.out_w();
  std::memset(image, 0, sizeof(float) * g.channels * g.height * g.width);
  for (int c = 0; c < g.channels; ++c) {
    float* plane = image + static_cast<long>(c) * g.height * g.width;
    for (int ki = 0; ki < g.kernel_h; ++ki) {
      for (int kj = 0; kj < g.kernel_w; ++kj) {
        const auto [ox_begin, ox_end] = valid_columns(g, kj);
        for (int oy = 0; oy < oh; ++oy) {
          const int iy = oy * g.stride - g.padding + ki;
          if (iy < 0 || iy >= g.height) continue;
          const float* in = columns + static_cast<long>(oy) * ow;
          float* row = plane + static_cast<long>(iy) * g.width;
          const int shift = kj - g.padding;
          if (g.stride == 1) {
            for (int ox = ox_begin; ox < ox_end; ++ox) row[ox + shift] += in[ox];
          } else {
            for (int ox = ox_begin; ox < ox_end; ++ox) row[ox * g.stride + shift] += in[ox];
          }
        }
        columns += ld;
      }
    }
  }
}

}  // namespace

}  // namespace hearsay::cpu
