#include "kernels/cpu/small_gemm.hpp"

#include <algorithm>
#include <array>
#include <utility>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/intrinsics.hpp"

namespace hearsay::cpu {

namespace {

// Reference loops for strides BLAS cannot express (neither stride of A is 1).
void small_gemm_loops(int m, int n, int k, const float* a, long a_row, long a_col, const float* b, long ldb,
                      float* c, long ldc, bool accumulate) {
  for (int i = 0; i < m; ++i) {
    float* row = c + i * ldc;
    if (!accumulate) std::fill(row, row + n, 0.0f);
    for (int p = 0; p < k; ++p) {
      const float s = a[i * a_row + p * a_col];
      const float* brow = b + p * ldb;
      for (int j = 0; j < n; ++j) row[j] += s * brow[j];
    }
  }
}

#if HEARSAY_HAVE_AVX512_PATH
// K is cut into blocks so that a 32-column panel of B (kKBlock x 32 floats = 8 KiB)
// stays in L1 while every row block of A passes over it.
constexpr int kKBlock = 64;
constexpr int kMaxRows = 12;  // 12 rows x 2 vectors = 24 accumulators of the 32 registers

// One tile: rows [0, MR) x NV vectors of 16 columns; the last vector is masked.
template <int MR, int NV>
__attribute__((target("avx512f"), always_inline)) inline void tile(int k, const float* a, long a_row,
                                                                   long a_col, const float* b, long ldb,
                                                                   float* c, long ldc, __mmask16 last,
                                                                   bool accumulate) {
  // Every loop over MR and NV is unrolled so the accumulators live in registers (GCC
  // otherwise keeps the array in memory and spills it on every step).
  __m512 acc[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  for (int p = 0; p < k; ++p) {
    __m512 bv[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v)
      bv[v] = v == NV - 1 ? _mm512_maskz_loadu_ps(last, b + p * ldb + v * 16)
                          : _mm512_loadu_ps(b + p * ldb + v * 16);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m512 s = _mm512_set1_ps(a[i * a_row + p * a_col]);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(s, bv[v], acc[i][v]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      const __mmask16 mask = v == NV - 1 ? last : __mmask16{0xFFFF};
      float* out = c + i * ldc + v * 16;
      __m512 r = acc[i][v];
      if (accumulate) r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(mask, out));
      _mm512_mask_storeu_ps(out, mask, r);
    }
  }
}

template <int MR>
__attribute__((target("avx512f"))) void row_block(int k, const float* a, long a_row, long a_col,
                                                  const float* b, long ldb, float* c, long ldc, int width,
                                                  bool accumulate) {
  if (width > 16) {
    const auto last = static_cast<__mmask16>(lane_mask(0, width - 16));
    tile<MR, 2>(k, a, a_row, a_col, b, ldb, c, ldc, last, accumulate);
  } else {
    const auto last = static_cast<__mmask16>(lane_mask(0, width));
    tile<MR, 1>(k, a, a_row, a_col, b, ldb, c, ldc, last, accumulate);
  }
}

using RowBlockFn = void (*)(int, const float*, long, long, const float*, long, float*, long, int, bool);
template <int... R>
constexpr auto make_row_blocks(std::integer_sequence<int, R...>) {
  return std::array<RowBlockFn, sizeof...(R)>{&row_block<R + 1>...};
}

__attribute__((target("avx512f"))) void small_gemm_avx512(int m, int n, int k, const float* a, long a_row,
                                                          long a_col, const float* b, long ldb, float* c,
                                                          long ldc, bool accumulate) {
  static constexpr auto blocks = make_row_blocks(std::make_integer_sequence<int, kMaxRows>{});
  // Rows are split into near-equal blocks of at most kMaxRows, so M = 50 runs as 5 x 10
  // and M = 81 as 4 x 12 + 3 x 11 instead of leaving a one-row remainder.
  const int row_blocks = (m + kMaxRows - 1) / kMaxRows;
  for (int p0 = 0; p0 < k; p0 += kKBlock) {
    const int kb = std::min(kKBlock, k - p0);
    const bool acc = accumulate || p0 > 0;
    for (int j = 0; j < n; j += 32) {
      const int width = std::min(32, n - j);
      int i = 0;
      for (int blk = 0; blk < row_blocks; ++blk) {
        const int rows = (m - i) / (row_blocks - blk);
        blocks[rows - 1](kb, a + i * a_row + p0 * a_col, a_row, a_col, b + p0 * ldb + j, ldb, c + i * ldc + j,
                         ldc, width, acc);
        i += rows;
      }
    }
  }
}

#endif

}  // namespace

void small_gemm(int m, int n, int k, const float* a, long a_row, long a_col, const float* b, long ldb,
                float* c, long ldc, bool accumulate) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (!accumulate)
      for (int i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
    return;
  }
#if HEARSAY_HAVE_AVX512_PATH
  if (has_avx512()) return small_gemm_avx512(m, n, k, a, a_row, a_col, b, ldb, c, ldc, accumulate);
#endif
  const float beta = accumulate ? 1.0f : 0.0f;
  if (a_col == 1 && a_row >= k)
    return sgemm(false, false, m, n, k, 1.0f, a, static_cast<int>(a_row), b, static_cast<int>(ldb), beta, c,
                 static_cast<int>(ldc));
  if (a_row == 1 && a_col >= m)
    return sgemm(true, false, m, n, k, 1.0f, a, static_cast<int>(a_col), b, static_cast<int>(ldb), beta, c,
                 static_cast<int>(ldc));
  small_gemm_loops(m, n, k, a, a_row, a_col, b, ldb, c, ldc, accumulate);
}

}  // namespace hearsay::cpu
