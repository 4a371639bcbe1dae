#include "kernels/cpu/convert.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/intrinsics.hpp"
#include "kernels/cuda/math/convert_math.hpp"

namespace hearsay::cpu {

namespace {

// Element access through memcpy: the buffers may sit at any byte address.
template <class T>
T load(const T* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T>
void store(T* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

std::uint32_t bits_of(float f) { return std::bit_cast<std::uint32_t>(f); }
float float_of(std::uint32_t u) { return std::bit_cast<float>(u); }

// The per-value arithmetic is the one the CUDA kernels run (kernels/cuda/math/convert_math.hpp,
// plain C++ on the host): integer rounding to nearest even, so the result depends on no
// FPU mode, and a payload encoded on a GPU has the bits it has here. NaN handling matches
// VCVTPS2PH / VCVTPH2PS (quiet bit set, payload kept), as the AVX-512 path does.
std::uint16_t f16_from_f32_bits(std::uint32_t f) { return cuda::f16_from_f32(float_of(f)); }
std::uint32_t f32_bits_from_f16(std::uint16_t h) { return bits_of(cuda::f32_from_f16(h)); }
std::uint16_t bf16_from_f32_bits(std::uint32_t f) { return cuda::bf16_from_f32(float_of(f)); }

// The int8 value of x / scale (scale != 0): round to nearest, ties to even, whatever the
// FPU rounding mode; NaN gives 0, +-inf and overflow clamp (the shared per-value math).
inline std::int8_t quantize(float x, float scale) { return cuda::int8_quantize(x, scale); }

// max|x| compared as bit patterns: for non-negative floats the integer order is the
// numeric order, NaN patterns sort above inf, and an integer max is associative, so the
// vector reduction gives exactly the same result as this loop.
std::uint32_t max_abs_bits(std::size_t n, const float* x) {
  std::uint32_t m = 0;
  for (std::size_t i = 0; i < n; ++i) m = std::max(m, bits_of(load(x + i)) & 0x7FFFFFFFu);
  return m;
}

void check_chunk(std::size_t chunk) {
  if (chunk == 0) throw std::invalid_argument("int8 conversion: chunk size must be at least 1 element");
}

}  // namespace

namespace portable {

void f32_to_f16(std::size_t n, const float* x, std::uint16_t* y) {
  for (std::size_t i = 0; i < n; ++i) store(y + i, f16_from_f32_bits(bits_of(load(x + i))));
}

void f16_to_f32(std::size_t n, const std::uint16_t* x, float* y) {
  for (std::size_t i = 0; i < n; ++i) store(y + i, float_of(f32_bits_from_f16(load(x + i))));
}

void f32_to_bf16(std::size_t n, const float* x, std::uint16_t* y) {
  for (std::size_t i = 0; i < n; ++i) store(y + i, bf16_from_f32_bits(bits_of(load(x + i))));
}

void bf16_to_f32(std::size_t n, const std::uint16_t* x, float* y) {
  for (std::size_t i = 0; i < n; ++i) store(y + i, float_of(static_cast<std::uint32_t>(load(x + i)) << 16));
}

void f32_to_int8(std::size_t n, std::size_t chunk, const float* x, std::int8_t* q, float* scales) {
  check_chunk(chunk);
  for (std::size_t start = 0, c = 0; start < n; start += chunk, ++c) {
    const std::size_t len = std::min(chunk, n - start);
    const float scale = float_of(max_abs_bits(len, x + start)) / 127.0f;
    store(scales + c, scale);
    if (scale == 0.0f) {
      std::memset(q + start, 0, len);
      continue;
    }
    for (std::size_t i = start; i < start + len; ++i) q[i] = quantize(load(x + i), scale);
  }
}

void int8_to_f32(std::size_t n, std::size_t chunk, const std::int8_t* q, const float* scales, float* y) {
  check_chunk(chunk);
  for (std::size_t start = 0, c = 0; start < n; start += chunk, ++c) {
    const std::size_t end = start + std::min(chunk, n - start);
    const float scale = load(scales + c);
    for (std::size_t i = start; i < end; ++i) store(y + i, static_cast<float>(q[i]) * scale);
  }
}

bool f16_all_finite(std::size_t n, const std::uint16_t* x) {
  unsigned bad = 0;
  for (std::size_t i = 0; i < n; ++i) bad |= (load(x + i) & 0x7C00u) == 0x7C00u;
  return bad == 0;
}

bool bf16_all_finite(std::size_t n, const std::uint16_t* x) {
  unsigned bad = 0;
  for (std::size_t i = 0; i < n; ++i) bad |= (load(x + i) & 0x7F80u) == 0x7F80u;
  return bad == 0;
}

}  // namespace portable

#if HEARSAY_HAVE_AVX512_PATH
namespace avx512 {

#define HEARSAY_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

// Mask of the first `count` lanes (count < 32).
inline __mmask32 first_lanes(std::size_t count) { return static_cast<__mmask32>((1u << count) - 1u); }

constexpr int kNearestEven = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

HEARSAY_AVX512 void f32_to_f16(std::size_t n, const float* x, std::uint16_t* y) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(x + i), kNearestEven);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), h);
  }
  if (i < n) {
    const auto m = static_cast<__mmask16>(first_lanes(n - i));
    const __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, x + i), kNearestEven);
    _mm256_mask_storeu_epi16(y + i, m, h);
  }
}

HEARSAY_AVX512 void f16_to_f32(std::size_t n, const std::uint16_t* x, float* y) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    _mm512_storeu_ps(y + i, _mm512_cvtph_ps(h));
  }
  if (i < n) {
    const auto m = static_cast<__mmask16>(first_lanes(n - i));
    _mm512_mask_storeu_ps(y + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i)));
  }
}

// The integer rounding of bf16_from_f32_bits, sixteen lanes at a time (result in the low
// half of each 32-bit lane).
HEARSAY_AVX512 inline __m512i bf16_lanes(__m512i f) {
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(f, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(f, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF)));
  const __m512i magnitude = _mm512_and_si512(f, _mm512_set1_epi32(0x7FFFFFFF));
  const __mmask16 nan = _mm512_cmpgt_epi32_mask(magnitude, _mm512_set1_epi32(0x7F800000));
  const __m512i quiet = _mm512_or_si512(f, _mm512_set1_epi32(0x00400000));
  return _mm512_srli_epi32(_mm512_mask_blend_epi32(nan, rounded, quiet), 16);
}

HEARSAY_AVX512 void f32_to_bf16(std::size_t n, const float* x, std::uint16_t* y) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i r = bf16_lanes(_mm512_loadu_si512(x + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm512_cvtepi32_epi16(r));
  }
  if (i < n) {
    const auto m = static_cast<__mmask16>(first_lanes(n - i));
    _mm512_mask_cvtepi32_storeu_epi16(y + i, m, bf16_lanes(_mm512_maskz_loadu_epi32(m, x + i)));
  }
}

HEARSAY_AVX512 void bf16_to_f32(std::size_t n, const std::uint16_t* x, float* y) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    _mm512_storeu_si512(y + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  if (i < n) {
    const auto m = static_cast<__mmask16>(first_lanes(n - i));
    const __m512i f = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, x + i)), 16);
    _mm512_mask_storeu_epi32(y + i, m, f);
  }
}

HEARSAY_AVX512 std::uint32_t max_abs_bits(std::size_t n, const float* x) {
  const __m512i magnitude = _mm512_set1_epi32(0x7FFFFFFF);
  __m512i acc = _mm512_setzero_si512();
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16)
    acc = _mm512_max_epu32(acc, _mm512_and_si512(_mm512_loadu_si512(x + i), magnitude));
  if (i < n) {
    const auto m = static_cast<__mmask16>(first_lanes(n - i));
    acc = _mm512_max_epu32(acc, _mm512_and_si512(_mm512_maskz_loadu_epi32(m, x + i), magnitude));
  }
  return _mm512_reduce_max_epu32(acc);
}

// The int32 value of quantize(x, scale) for sixteen lanes.
HEARSAY_AVX512 inline __m512i quantize_lanes(__m512 x, __m512 scale) {
  const __m512 v = _mm512_roundscale_ps(_mm512_div_ps(x, scale), kNearestEven);
  const __mmask16 not_nan = _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q);
  const __m512 clamped = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
  return _mm512_maskz_cvtps_epi32(not_nan, clamped);
}

HEARSAY_AVX512 void f32_to_int8(std::size_t n, std::size_t chunk, const float* x, std::int8_t* q,
                                float* scales) {
  check_chunk(chunk);
  for (std::size_t start = 0, c = 0; start < n; start += chunk, ++c) {
    const std::size_t len = std::min(chunk, n - start);
    const float scale = float_of(max_abs_bits(len, x + start)) / 127.0f;
    store(scales + c, scale);
    if (scale == 0.0f) {
      std::memset(q + start, 0, len);
      continue;
    }
    const __m512 s = _mm512_set1_ps(scale);
    const float* xc = x + start;
    std::int8_t* qc = q + start;
    std::size_t i = 0;
    for (; i + 16 <= len; i += 16)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qc + i),
                       _mm512_cvtsepi32_epi8(quantize_lanes(_mm512_loadu_ps(xc + i), s)));
    if (i < len) {
      const auto m = static_cast<__mmask16>(first_lanes(len - i));
      _mm512_mask_cvtsepi32_storeu_epi8(qc + i, m, quantize_lanes(_mm512_maskz_loadu_ps(m, xc + i), s));
    }
  }
}

HEARSAY_AVX512 void int8_to_f32(std::size_t n, std::size_t chunk, const std::int8_t* q, const float* scales,
                                float* y) {
  check_chunk(chunk);
  for (std::size_t start = 0, c = 0; start < n; start += chunk, ++c) {
    const std::size_t len = std::min(chunk, n - start);
    const __m512 s = _mm512_set1_ps(load(scales + c));
    const std::int8_t* qc = q + start;
    float* yc = y + start;
    std::size_t i = 0;
    for (; i + 16 <= len; i += 16) {
      const __m512i v = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qc + i)));
      _mm512_storeu_ps(yc + i, _mm512_mul_ps(_mm512_cvtepi32_ps(v), s));
    }
    if (i < len) {
      const auto m = static_cast<__mmask16>(first_lanes(len - i));
      const __m512i v = _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, qc + i));
      _mm512_mask_storeu_ps(yc + i, m, _mm512_mul_ps(_mm512_cvtepi32_ps(v), s));
    }
  }
}

// Whether any of the 32 values in v has all `exponent` bits set.
HEARSAY_AVX512 inline bool any_special(__m512i v, __m512i exponent) {
  return _mm512_cmpeq_epi16_mask(_mm512_and_si512(v, exponent), exponent) != 0;
}

HEARSAY_AVX512 bool all_finite_16bit(std::size_t n, const std::uint16_t* x, std::uint16_t exponent_bits) {
  const __m512i exponent = _mm512_set1_epi16(static_cast<short>(exponent_bits));
  std::size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    // Two vectors per test keep the loop branch off the critical path.
    const __m512i a = _mm512_and_si512(_mm512_loadu_si512(x + i), exponent);
    const __m512i b = _mm512_and_si512(_mm512_loadu_si512(x + i + 32), exponent);
    if ((_mm512_cmpeq_epi16_mask(a, exponent) | _mm512_cmpeq_epi16_mask(b, exponent)) != 0) return false;
  }
  for (; i + 32 <= n; i += 32)
    if (any_special(_mm512_loadu_si512(x + i), exponent)) return false;
  if (i < n) return !any_special(_mm512_maskz_loadu_epi16(first_lanes(n - i), x + i), exponent);
  return true;
}

#undef HEARSAY_AVX512

}  // namespace avx512
#endif

#if HEARSAY_HAVE_AVX512_PATH
#define HEARSAY_DISPATCH(call) return has_avx512() ? avx512::call : portable::call
#else
#define HEARSAY_DISPATCH(call) return portable::call
#endif

void f32_to_f16(std::size_t n, const float* x, std::uint16_t* y) { HEARSAY_DISPATCH(f32_to_f16(n, x, y)); }
void f16_to_f32(std::size_t n, const std::uint16_t* x, float* y) { HEARSAY_DISPATCH(f16_to_f32(n, x, y)); }
void f32_to_bf16(std::size_t n, const float* x, std::uint16_t* y) { HEARSAY_DISPATCH(f32_to_bf16(n, x, y)); }
void bf16_to_f32(std::size_t n, const std::uint16_t* x, float* y) { HEARSAY_DISPATCH(bf16_to_f32(n, x, y)); }
void f32_to_int8(std::size_t n, std::size_t chunk, const float* x, std::int8_t* q, float* scales) {
  HEARSAY_DISPATCH(f32_to_int8(n, chunk, x, q, scales));
}
void int8_to_f32(std::size_t n, std::size_t chunk, const std::int8_t* q, const float* scales, float* y) {
  HEARSAY_DISPATCH(int8_to_f32(n, chunk, q, scales, y));
}
bool f16_all_finite(std::size_t n, const std::uint16_t* x) {
#if HEARSAY_HAVE_AVX512_PATH
  if (has_avx512()) return avx512::all_finite_16bit(n, x, 0x7C00);
#endif
  return portable::f16_all_finite(n, x);
}
bool bf16_all_finite(std::size_t n, const std::uint16_t* x) {
#if HEARSAY_HAVE_AVX512_PATH
  if (has_avx512()) return avx512::all_finite_16bit(n, x, 0x7F80);
#endif
  return portable::bf16_all_finite(n, x);
}

#undef HEARSAY_DISPATCH

const char* convert_implementation() {
  return HEARSAY_HAVE_AVX512_PATH && has_avx512() ? "avx512" : "portable";
}

}  // namespace hearsay::cpu
