// Per-element arithmetic of the wire dtype kernels (kernels/cuda/convert.cu), shared with
// the host tests that sweep it against cpu::portable (kernels/cpu/convert.cpp). Each
// function is the portable one's integer or IEEE arithmetic, so a payload encoded on a
// GPU has the same bits as one encoded on any CPU.
#pragma once
#include <cstdint>

#include "kernels/cuda/host_device.hpp"

namespace hearsay::cuda {

// binary16 bits of an fp32 value: round to nearest even in integer arithmetic, |x| >=
// 65520 to inf, fp32 subnormals to zero, NaN made quiet keeping the top payload bits.
HEARSAY_HD inline std::uint16_t f16_from_f32(float x) {
  const std::uint32_t f = bits_of(x);
  const auto sign = static_cast<std::uint16_t>((f >> 16) & 0x8000u);
  const std::uint32_t a = f & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
  if (a >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);
  if (a >= 0x38800000u) {
    // Normal binary16: rebias the exponent, round the mantissa; a carry bumps the exponent.
    std::uint32_t r = a - 0x38000000u;
    r += 0x0FFFu + ((r >> 13) & 1u);
    return static_cast<std::uint16_t>(sign | (r >> 13));
  }
  // Subnormal binary16 in units of 2^-24; 2^-25 and below round to zero.
  if (a <= 0x33000000u) return sign;
  const std::uint32_t exponent = a >> 23;
  const std::uint32_t mantissa = (a & 0x7FFFFFu) | 0x800000u;
  const std::uint32_t shift = 126u - exponent;
  std::uint32_t units = mantissa >> shift;
  const std::uint32_t rest = mantissa & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1u);
  if (rest > half || (rest == half && (units & 1u))) ++units;
  return static_cast<std::uint16_t>(sign | units);
}

// The fp32 value of binary16 bits (exact); NaN made quiet keeping the payload.
HEARSAY_HD inline float f32_from_f16(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1Fu;
  const std::uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1F)
    return float_of(mantissa == 0 ? sign | 0x7F800000u : sign | 0x7FC00000u | (mantissa << 13));
  if (exponent != 0) return float_of(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  // Zero or subnormal: mantissa * 2^-24 is an exact, normal fp32 value.
  return float_of(sign | bits_of(mul_rn(static_cast<float>(mantissa), 0x1p-24f)));
}

// bfloat16 bits of an fp32 value: round to nearest even, overflow carries into inf, NaN
// made quiet.
HEARSAY_HD inline std::uint16_t bf16_from_f32(float x) {
  std::uint32_t f = bits_of(x);
  if ((f & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((f | 0x00400000u) >> 16);
  f += 0x7FFFu + ((f >> 16) & 1u);
  return static_cast<std::uint16_t>(f >> 16);
}

HEARSAY_HD inline float f32_from_bf16(std::uint16_t h) {
  return float_of(static_cast<std::uint32_t>(h) << 16);
}

// Whether binary16 / bfloat16 bits encode inf or NaN.
HEARSAY_HD inline bool f16_special(std::uint16_t h) { return (h & 0x7C00u) == 0x7C00u; }
HEARSAY_HD inline bool bf16_special(std::uint16_t h) { return (h & 0x7F80u) == 0x7F80u; }

// |x| as bits: for non-negative floats the integer order is the numeric order (NaN
// patterns above inf), so an integer max over a chunk, in any order, gives max|x|.
HEARSAY_HD inline std::uint32_t abs_bits(float x) { return bits_of(x) & 0x7FFFFFFFu; }

// A chunk's int8 scale from its max|x| bits: max|x| / 127 (0 for an all-zero chunk; NaN
// or inf when the chunk holds one).
HEARSAY_HD inline float int8_scale(std::uint32_t max_abs_bits) { return float_of(max_abs_bits) / 127.0f; }

// The int8 value of x in a chunk with this scale: 0 when scale is 0; otherwise x / scale
// rounded to nearest, ties to even, clamped to [-127, 127], NaN to 0 (cpu::portable's
// branch-free rounding, with std::min/std::max written out).
HEARSAY_HD inline std::int8_t int8_quantize(float x, float scale) {
  if (scale == 0.0f) return 0;
  const float v = x / scale;
  const float low = v < -127.0f ? -127.0f : v;     // std::max(v, -127.0f)
  const float high = 127.0f < low ? 127.0f : low;  // std::min(low, 127.0f)
  const float clamped = v != v ? 0.0f : high;      // NaN to 0
  const int truncated = static_cast<int>(clamped);
  const float frac = clamped - static_cast<float>(truncated);  // exact
  const int odd = truncated & 1;
  const int up = (frac > 0.5f) | ((frac == 0.5f) & odd);
  const int down = (frac < -0.5f) | ((frac == -0.5f) & odd);
  return static_cast<std::int8_t>(truncated + up - down);
}

HEARSAY_HD inline float int8_dequantize(std::int8_t q, float scale) {
  return mul_rn(static_cast<float>(q), scale);
}

}  // namespace hearsay::cuda
