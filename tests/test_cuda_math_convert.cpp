// The per-element functions of the wire dtype conversions (kernels/cuda/math/
// convert_math.hpp, which the CUDA kernels and the CPU's portable path both run), on the
// CPU against independent references: the edge values of each format, every binary16 /
// bfloat16 pattern, random fp32 patterns, and the int8 chunking as the device blocks
// perform it against cpu::portable's loop order. No GPU needed.
#include <algorithm>
#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "base/rng.hpp"
#include "kernels/cpu/convert.hpp"
#include "kernels/cpu/vector.hpp"
#include "kernels/cuda/math/convert_math.hpp"
#include "tests/cuda_math_test_util.hpp"

using namespace hearsay;
using namespace hearsay::cuda_math_test;

namespace {

float f32(std::uint32_t bits) { return std::bit_cast<float>(bits); }
bool same_i8(std::int8_t a, std::int8_t b) { return a == b; }

// The hard cases of both encoders (and their negations) followed by random bit patterns,
// which cover NaN payloads, subnormals and every exponent.
std::vector<float> edge_and_random_f32(std::size_t random_count, std::uint64_t seed) {
  const std::uint32_t edges[] = {
      0x00000000u, 0x00000001u, 0x007FFFFFu, 0x00800000u,  // zero, f32 subnormals, smallest normal
      0x33000000u, 0x33000001u, 0x337FFFFFu, 0x33800000u,  // around 2^-25: half the smallest f16 subnormal
      0x33C00000u, 0x34000000u, 0x387FC000u, 0x387FE000u,  // f16 subnormal ties, just below 2^-14
      0x387FFFFFu, 0x38800000u, 0x38801000u, 0x38803000u,  // 2^-14 (smallest normal f16), normal ties
      0x3F800000u, 0x3F801000u, 0x3F802000u, 0x3F803000u,  // 1 and ties to even either way
      0x477FE000u, 0x477FEFFFu, 0x477FF000u, 0x47800000u,  // 65504, just under 65520, 65520, 65536
      0x7F7F7FFFu, 0x7F7F8000u, 0x7F7FFFFFu, 0x7F800000u,  // bf16 overflow by rounding, FLT_MAX, inf
      0x7F800001u, 0x7FA00000u, 0x7FBFFFFFu, 0x7FC00000u,  // signalling NaNs, quiet NaN
      0x7FC01234u, 0x7FFFFFFFu, 0x3F808000u, 0x3F818000u,  // NaN payloads; bf16 ties
      0x34200000u, 0x34600000u, 0x38002000u, 0x38006000u,  // f16 subnormal ties: 2.5, 3.5, 512.5, 513.5 units
  };
  std::vector<float> v;
  for (const std::uint32_t e : edges) {
    v.push_back(f32(e));
    v.push_back(f32(e | 0x80000000u));
  }
  Rng rng(seed);
  for (std::size_t i = 0; i < random_count; ++i) v.push_back(f32(static_cast<std::uint32_t>(rng.next_u64())));
  return v;
}

std::vector<std::uint16_t> every_16bit_pattern() {
  std::vector<std::uint16_t> v(65536);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::uint16_t>(i);
  return v;
}

}  // namespace

// Independent references, since the CPU's portable converters run these same functions:
// GCC's _Float16 conversions (libgcc's soft-float, round to nearest even) for binary16,
// and the nearer of the two bfloat16 neighbours, computed in double, for bfloat16. NaNs
// are checked against the rule (quiet bit set, top payload bits kept) and against the
// dispatched CPU converter, which is the hardware's VCVTPS2PH on AVX-512 machines.
std::uint16_t f16_reference(float x) { return std::bit_cast<std::uint16_t>(static_cast<_Float16>(x)); }

std::uint16_t bf16_reference(float x) {
  const std::uint32_t f = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t down = f & 0xFFFF0000u, up = down + 0x10000u;  // toward zero, away from zero
  if ((f & 0xFFFFu) == 0) return static_cast<std::uint16_t>(f >> 16);
  const double d = x, lo = f32(down);
  // Past the largest finite value the upper neighbour is inf: compare with 2^128 instead.
  const double hi =
      (up & 0x7FFFFFFFu) == 0x7F800000u ? std::copysign(std::ldexp(1.0, 128), d) : double(f32(up));
  const double to_lo = std::fabs(d - lo), to_hi = std::fabs(hi - d);
  const bool take_up = to_hi < to_lo || (to_hi == to_lo && ((down >> 16) & 1u));
  return static_cast<std::uint16_t>((take_up ? up : down) >> 16);
}

TEST_CASE("f16 and bf16 encoders round to nearest even like independent references", "[cuda_math]") {
  const std::vector<float> x = edge_and_random_f32(1 << 18, 41);
  const std::size_t n = x.size();
  std::vector<std::uint16_t> dispatched(n);
  cpu::f32_to_f16(n, x.data(), dispatched.data());
  for (std::size_t phase = 0; phase < 4; ++phase) {
    INFO("phase " << phase);
    Phased<float> px(x, phase);
    std::size_t wrong16 = 0, wrongb = 0, wrong_nan = 0, first = n;
    for (std::size_t i = 0; i < n; ++i) {
      const float v = px.data()[i];
      const std::uint16_t h = cuda::f16_from_f32(v), b = cuda::bf16_from_f32(v);
      if (std::isnan(v)) {
        const std::uint32_t f = std::bit_cast<std::uint32_t>(v);
        const bool quiet16 = (h & 0x7E00u) == 0x7E00u && (h & 0x3FFu) == (((f >> 13) & 0x3FFu) | 0x200u);
        const bool quietb = b == static_cast<std::uint16_t>((f | 0x00400000u) >> 16);
        wrong_nan += !quiet16 || !quietb || h != dispatched[i];
        continue;
      }
      const bool bad16 = h != f16_reference(v), badb = b != bf16_reference(v);
      wrong16 += bad16;
      wrongb += badb;
      if ((bad16 || badb) && first == n) first = i;
    }
    INFO("first wrong value: " << (first < n ? px.data()[first] : 0.0f));
    CHECK(wrong16 == 0);
    CHECK(wrongb == 0);
    CHECK(wrong_nan == 0);
  }
}

TEST_CASE("f16 and bf16 decoders give the exact value of every pattern", "[cuda_math]") {
  std::size_t wrong16 = 0, wrongb = 0;
  for (std::uint32_t p = 0; p < 65536; ++p) {
    const auto h = static_cast<std::uint16_t>(p);
    const float got16 = cuda::f32_from_f16(h), gotb = cuda::f32_from_bf16(h);
    const float want16 = static_cast<float>(std::bit_cast<_Float16>(h));
    // bfloat16: sign, 8 exponent bits and 7 mantissa bits, valued in double.
    const int e = (p >> 7) & 0xFF, m = p & 0x7F;
    const double mag = e == 0 ? std::ldexp(m, -133) : std::ldexp(128 + m, e - 134);
    const double wantb = (p & 0x8000u) ? -mag : mag;
    if (std::isnan(want16)) {
      wrong16 += !std::isnan(got16) || (std::bit_cast<std::uint32_t>(got16) & 0x00400000u) == 0;
    } else {
      wrong16 += std::bit_cast<std::uint32_t>(got16) != std::bit_cast<std::uint32_t>(want16);
    }
    if (e == 0xFF) {
      wrongb += m == 0 ? !std::isinf(gotb) : !std::isnan(gotb);
    } else {
      wrongb += double(gotb) != wantb || std::signbit(gotb) != bool(p & 0x8000u);
    }
  }
  CHECK(wrong16 == 0);
  CHECK(wrongb == 0);
}

TEST_CASE("f16 and bf16 finiteness tests agree with cpu::portable for every pattern", "[cuda_math]") {
  std::size_t f16_bad = 0, bf16_bad = 0, f16_special = 0;
  for (const std::uint16_t h : every_16bit_pattern()) {
    f16_bad += cuda::f16_special(h) == cpu::portable::f16_all_finite(1, &h);
    bf16_bad += cuda::bf16_special(h) == cpu::portable::bf16_all_finite(1, &h);
    f16_special += cuda::f16_special(h);
  }
  CHECK(f16_bad == 0);
  CHECK(bf16_bad == 0);
  CHECK(f16_special == 2 * 1024);  // +-inf and the NaNs: exponent all ones, either sign
  // And the fp32 test of all_finite on the edge patterns.
  std::size_t f32_bad = 0;
  for (const float v : edge_and_random_f32(1 << 12, 43))
    f32_bad += cuda::f32_bits_special(cuda::bits_of(v)) == cpu::all_finite(1, &v);
  CHECK(f32_bad == 0);
}

namespace {

constexpr unsigned kInt8Threads = 256;  // f32_to_int8_kernel's block size

// f32_to_int8 as the device performs it: per chunk, lane t's max over elements t, t +
// 256, ..., the tree of maxima, the scale, then every element quantized.
void device_order_f32_to_int8(std::size_t n, std::size_t chunk, const float* x, std::int8_t* q,
                              float* scales) {
  for (std::size_t start = 0, c = 0; start < n; start += chunk, ++c) {
    const std::size_t len = std::min(chunk, n - start);
    std::uint32_t top[kInt8Threads];
    for (unsigned t = 0; t < kInt8Threads; ++t) {
      std::uint32_t m = 0;
      for (std::size_t i = t; i < len; i += kInt8Threads) m = std::max(m, cuda::abs_bits(x[start + i]));
      top[t] = m;
    }
    for (unsigned half = kInt8Threads / 2; half > 0; half /= 2)
      for (unsigned t = 0; t < half; ++t) top[t] = std::max(top[t], top[t + half]);
    const float scale = cuda::int8_scale(top[0]);
    scales[c] = scale;
    for (std::size_t i = 0; i < len; ++i) q[start + i] = cuda::int8_quantize(x[start + i], scale);
  }
}

// Chunks that test the quantizer: normals, an all-zero chunk, exact ties (max 127 gives
// scale 1, so k + 0.5 lands on a tie), subnormals only, and chunks with NaN and inf.
std::vector<float> int8_values(std::size_t n, std::size_t chunk, std::uint64_t seed) {
  std::vector<float> x = normals(n, seed, 3.0f);
  const std::size_t chunks = (n + chunk - 1) / chunk;
  for (std::size_t c = 0; c < chunks; ++c) {
    const std::size_t start = c * chunk, end = std::min(n, start + chunk);
    switch (c % 6) {
      case 1:
        for (std::size_t i = start; i < end; ++i) x[i] = 0.0f;
        break;
      case 2:
        for (std::size_t i = start; i < end; ++i)
          x[i] = static_cast<float>(static_cast<int>(i % 254) - 127) + 0.5f;
        x[start] = 127.0f;
        break;
      case 3:
        for (std::size_t i = start; i < end; ++i) x[i] = f32(static_cast<std::uint32_t>(1 + i % 0x7FFFFF));
        break;
      case 4:
        x[(start + end) / 2] = std::numeric_limits<float>::quiet_NaN();
        break;
      case 5:
        x[end - 1] = -std::numeric_limits<float>::infinity();
        break;
      default:
        break;
    }
  }
  return x;
}

}  // namespace

TEST_CASE("int8 chunk scales, quantization and dequantization match cpu::portable", "[cuda_math]") {
  const std::size_t sizes[] = {1, 5, 255, 256, 257, 1000, 6 * 256 + 5};
  const std::size_t chunks[] = {1, 7, 256, 300};
  for (const std::size_t n : sizes) {
    for (const std::size_t chunk : chunks) {
      const std::vector<float> x = int8_values(n, chunk, n * 31 + chunk);
      const std::size_t count = (n + chunk - 1) / chunk;
      std::vector<std::int8_t> want_q(n);
      std::vector<float> want_scales(count), want_y(n);
      cpu::portable::f32_to_int8(n, chunk, x.data(), want_q.data(), want_scales.data());
      cpu::portable::int8_to_f32(n, chunk, want_q.data(), want_scales.data(), want_y.data());
      for (std::size_t phase = 0; phase < 4; ++phase) {
        INFO("n=" << n << " chunk=" << chunk << " phase=" << phase);
        Phased<float> px(x, phase);
        std::vector<std::int8_t> q(n);
        std::vector<float> scales(count), y(n);
        device_order_f32_to_int8(n, chunk, px.data(), q.data(), scales.data());
        CHECK(differences(scales, want_scales, same_bits) == "");
        CHECK(differences(q, want_q, same_i8) == "");
        for (std::size_t i = 0; i < n; ++i) y[i] = cuda::int8_dequantize(want_q[i], want_scales[i / chunk]);
        CHECK(differences(y, want_y, same_bits) == "");
      }
    }
  }
}

TEST_CASE("int8_quantize rounds ties to even and clamps like cpu::portable", "[cuda_math]") {
  // Scale 1: x / scale is x, so each tie and bound is hit exactly.
  const float xs[] = {0.5f,   1.5f,    2.5f,   -0.5f,  -1.5f,   -2.5f,
                      126.5f, -126.5f, 127.4f, 200.0f, -300.0f, 0.49999997f};
  for (const float v : xs) {
    const float chunk[2] = {v, 127.0f};  // max|x| >= 127 fixes the scale at 127/127 = 1 unless v is larger
    std::int8_t want[2];
    float scale = 0.0f;
    cpu::portable::f32_to_int8(2, 2, chunk, want, &scale);
    INFO("x=" << v << " scale=" << scale);
    CHECK(cuda::int8_scale(std::max(cuda::abs_bits(v), cuda::abs_bits(127.0f))) == scale);
    CHECK(+cuda::int8_quantize(v, scale) == +want[0]);
  }
}
