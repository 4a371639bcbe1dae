// Payload dtype conversions: exact encodings checked by hand, round-trip error bounds,
// the AVX-512 path against the portable one bit for bit, and unaligned buffers.
#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "base/rng.hpp"
#include "kernels/cpu/convert.hpp"

using namespace hearsay;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr std::size_t kChunk = 256;  // the wire's int8 chunk

float f32(std::uint32_t bits) { return std::bit_cast<float>(bits); }
std::uint32_t bits(float f) { return std::bit_cast<std::uint32_t>(f); }

// A buffer of n T's starting `offset` bytes past an aligned address, as a payload inside
// a received frame may. Elements are accessed through memcpy only.
template <class T>
class Buffer {
 public:
  Buffer(std::size_t n, std::size_t offset) : n_(n), offset_(offset), bytes_(n * sizeof(T) + offset + 1) {}
  explicit Buffer(const std::vector<T>& values, std::size_t offset) : Buffer(values.size(), offset) {
    if (!values.empty()) std::memcpy(bytes_.data() + offset_, values.data(), values.size() * sizeof(T));
  }
  T* data() { return reinterpret_cast<T*>(bytes_.data() + offset_); }
  std::vector<T> values() const {
    std::vector<T> v(n_);
    if (n_ != 0) std::memcpy(v.data(), bytes_.data() + offset_, n_ * sizeof(T));
    return v;
  }

 private:
  std::size_t n_, offset_;
  std::vector<unsigned char> bytes_;
};

// Normal values over many binades: |x| from about 2^-12 to 2^15 (inside binary16's
// normal range, 2^-14 .. 65504), plus a few zeros.
std::vector<float> wide_range_values(std::size_t n, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x(n);
  for (auto& v : x) {
    const double binade = std::floor(rng.uniform() * 26.0) - 12.0;
    v = static_cast<float>((1.0 + rng.uniform()) * std::ldexp(1.0, static_cast<int>(binade)));
    if (rng.uniform() < 0.5) v = -v;
    if (rng.uniform() < 0.01) v = 0.0f;
  }
  return x;
}

// The hard cases for a converter, mixed with random bit patterns (which cover NaN
// payloads, subnormals and every exponent): ties for both 16-bit formats, binary16
// subnormal ties, +-0, +-inf, quiet and signalling NaN, values around the binary16 overflow
// threshold, f32 subnormals.
std::vector<float> nasty_values(std::size_t n, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x(n);
  const std::uint32_t specials[] = {
      0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00001u, 0x7F800001u, 0x7FBFFFFFu,
      0x477FE000u, 0x477FEFFFu, 0x477FF000u, 0x477FF001u, 0xC77FF000u, 0x7F7FFFFFu, 0x00000001u, 0x807FFFFFu,
      0x38800000u, 0x387FFFFFu, 0x33000000u, 0x33000001u, 0x33800000u, 0x3F808000u, 0x3F818000u, 0x7F7F8000u};
  for (auto& v : x) {
    const auto r = static_cast<std::uint32_t>(rng.next_u64());
    const std::uint32_t sign = r & 0x80000000u;
    switch (rng.below(6)) {
      case 0:
        v = f32(r);
        break;
      case 1:  // binary16 tie: the 13 dropped bits are exactly one half, any exponent
        v = f32(sign | (static_cast<std::uint32_t>(rng.below(0x7F800000u)) & ~0x1FFFu) | 0x1000u);
        break;
      case 2:  // bfloat16 tie
        v = f32(sign | (static_cast<std::uint32_t>(rng.below(0x7F800000u)) & ~0xFFFFu) | 0x8000u);
        break;
      case 3:  // binary16 subnormal range (2^-25 .. 2^-14), ties included
        v = f32(sign | (static_cast<std::uint32_t>(0x33000000u + rng.below(0x38800000u - 0x33000000u)) &
                        (rng.below(2) ? ~0u : ~0xFFFu)));
        break;
      case 4:
        v = f32(specials[rng.below(std::size(specials))] ^ (rng.below(2) ? 0u : 0x80000000u));
        break;
      default:
        v = static_cast<float>(rng.normal());
        break;
    }
  }
  return x;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

std::uint16_t f16_of(float v) {
  std::uint16_t h = 0;
  cpu::f32_to_f16(1, &v, &h);
  std::uint16_t p = 0;
  cpu::portable::f32_to_f16(1, &v, &p);
  REQUIRE(h == p);
  return h;
}
std::uint16_t bf16_of(float v) {
  std::uint16_t h = 0;
  cpu::f32_to_bf16(1, &v, &h);
  std::uint16_t p = 0;
  cpu::portable::f32_to_bf16(1, &v, &p);
  REQUIRE(h == p);
  return h;
}
std::uint32_t f32_bits_of_f16(std::uint16_t h) {
  float v = 0;
  cpu::f16_to_f32(1, &h, &v);
  return bits(v);
}

}  // namespace

TEST_CASE("f16 encodings of chosen values are the IEEE ones", "[convert]") {
  CHECK(f16_of(1.0f) == 0x3C00);
  CHECK(f16_of(-2.0f) == 0xC000);
  CHECK(f16_of(0.0f) == 0x0000);
  CHECK(f16_of(-0.0f) == 0x8000);
  CHECK(f16_of(65504.0f) == 0x7BFF);    // largest binary16
  CHECK(f16_of(65519.996f) == 0x7BFF);  // just below the halfway point to 65536
  CHECK(f16_of(65520.0f) == 0x7C00);    // halfway: ties to even, and 0x7C00 (inf) is even
  CHECK(f16_of(-1e9f) == 0xFC00);
  CHECK(f16_of(kInf) == 0x7C00);
  CHECK(f16_of(0x1p-14f) == 0x0400);  // smallest normal
  CHECK(f16_of(0x1p-24f) == 0x0001);  // smallest subnormal
  CHECK(f16_of(0x1p-25f) == 0x0000);  // halfway to it: ties to even (zero)
  CHECK(f16_of(0x1.8p-25f) == 0x0001);
  CHECK(f16_of(0x1.8p-24f) == 0x0002);   // 1.5 units: tie, rounds up to even 2
  CHECK(f16_of(0x1.002p0f) == 0x3C00);   // 1 + 2^-11: tie between 0x3C00 and 0x3C01, even wins
  CHECK(f16_of(0x1.006p0f) == 0x3C02);   // 1 + 3*2^-11: tie, rounds up to the even 0x3C02
  CHECK(f16_of(0x1.0021p0f) == 0x3C01);  // just above the tie
  CHECK(f16_of(1.0f / 3.0f) == 0x3555);
  CHECK(f16_of(f32(0x00000001u)) == 0x0000);  // f32 subnormals are far below binary16's range
  const std::uint16_t nan = f16_of(std::numeric_limits<float>::quiet_NaN());
  CHECK((nan & 0x7C00) == 0x7C00);
  CHECK((nan & 0x03FF) != 0);
  const std::uint16_t signalling = f16_of(f32(0x7F800001u));  // payload only in the dropped bits
  CHECK(signalling == 0x7E00);                                // still NaN, made quiet

  CHECK(f32_bits_of_f16(0x3C00) == bits(1.0f));
  CHECK(f32_bits_of_f16(0x7BFF) == bits(65504.0f));
  CHECK(f32_bits_of_f16(0x0001) == bits(0x1p-24f));
  CHECK(f32_bits_of_f16(0x83FF) == bits(-0x1.FF8p-15f));  // largest subnormal, negative
  CHECK(f32_bits_of_f16(0x8000) == bits(-0.0f));
  CHECK(f32_bits_of_f16(0xFC00) == bits(-kInf));
  CHECK(std::isnan(f32(f32_bits_of_f16(0x7C01))));
}

TEST_CASE("bf16 encodings of chosen values round to nearest even", "[convert]") {
  CHECK(bf16_of(1.0f) == 0x3F80);
  CHECK(bf16_of(-2.0f) == 0xC000);
  CHECK(bf16_of(-0.0f) == 0x8000);
  CHECK(bf16_of(3.14159265f) == 0x4049);
  CHECK(bf16_of(0x1.01p0f) == 0x3F80);         // 1 + 2^-8: tie, even (0x3F80) wins
  CHECK(bf16_of(0x1.03p0f) == 0x3F82);         // 1 + 3*2^-8: tie, rounds up to even
  CHECK(bf16_of(0x1.0101p0f) == 0x3F81);       // just above the tie
  CHECK(bf16_of(f32(0x7F7FFFFFu)) == 0x7F80);  // largest f32 rounds past the largest bf16: inf
  CHECK(bf16_of(f32(0x7F7F7FFFu)) == 0x7F7F);  // largest bf16
  CHECK(bf16_of(-kInf) == 0xFF80);
  CHECK(bf16_of(f32(0x00000001u)) == 0x0000);  // subnormals round like any value
  CHECK(bf16_of(f32(0x00008000u)) == 0x0000);  // tie, even
  CHECK(bf16_of(f32(0x00018000u)) == 0x0002);
  CHECK(bf16_of(f32(0x7F800001u)) == 0x7FC0);  // signalling NaN with a low payload: quiet NaN
  CHECK(bf16_of(f32(0xFFC12345u)) == 0xFFC1);

  const std::uint16_t h = 0x3F80;
  float v = 0;
  cpu::bf16_to_f32(1, &h, &v);
  CHECK(v == 1.0f);
}

TEST_CASE("int8 chunks of chosen values have the documented scales and codes", "[convert]") {
  // chunk 4: scale 1 (ties -1.5, 2.5 to even); an all-zero chunk; scale 2 (0.5 and 1.5
  // ties); a short last chunk with scale 4.
  const std::vector<float> x{127, -1.5f, 2.5f, 0.4f, 0, 0, 0, 0, -254, 1, 3, 0, -508, 41};
  const std::vector<std::int8_t> expect_q{127, -2, 2, 0, 0, 0, 0, 0, -127, 0, 2, 0, -127, 10};
  const std::vector<float> expect_scales{1, 0, 2, 4};
  for (auto convert : {&cpu::f32_to_int8, &cpu::portable::f32_to_int8}) {
    std::vector<std::int8_t> q(x.size(), 99);
    std::vector<float> scales(4, -1);
    convert(x.size(), 4, x.data(), q.data(), scales.data());
    CHECK(q == expect_q);
    CHECK(scales == expect_scales);
  }
  std::vector<float> y(x.size());
  cpu::int8_to_f32(x.size(), 4, expect_q.data(), expect_scales.data(), y.data());
  CHECK(y == std::vector<float>{127, -2, 2, 0, 0, 0, 0, 0, -254, 0, 4, 0, -508, 40});
}

TEST_CASE("int8 keeps non-finite values detectable through the scale", "[convert]") {
  std::vector<float> x(12, 1.0f);
  x[5] = kInf;                                     // chunk 1
  x[9] = std::numeric_limits<float>::quiet_NaN();  // chunk 2
  for (auto convert : {&cpu::f32_to_int8, &cpu::portable::f32_to_int8}) {
    std::vector<std::int8_t> q(x.size());
    std::vector<float> scales(3);
    convert(x.size(), 4, x.data(), q.data(), scales.data());
    CHECK(scales[0] == 1.0f / 127.0f);
    CHECK(std::isinf(scales[1]));
    CHECK(std::isnan(scales[2]));
    std::vector<float> y(x.size());
    cpu::int8_to_f32(x.size(), 4, q.data(), scales.data(), y.data());
    for (std::size_t i = 0; i < 4; ++i) CHECK(std::isfinite(y[i]));
    CHECK_FALSE(std::isfinite(y[4]));  // 0 * inf
    CHECK_FALSE(std::isfinite(y[8]));
  }
}

TEST_CASE("int8 rejects a zero chunk size", "[convert]") {
  float x = 1, scale = 0, y = 0;
  std::int8_t q = 0;
  CHECK_THROWS_AS(cpu::f32_to_int8(1, 0, &x, &q, &scale), std::invalid_argument);
  CHECK_THROWS_AS(cpu::int8_to_f32(1, 0, &q, &scale, &y), std::invalid_argument);
  CHECK_THROWS_AS(cpu::portable::f32_to_int8(1, 0, &x, &q, &scale), std::invalid_argument);
}

TEST_CASE("round trips stay within the documented error bounds", "[convert]") {
  for (std::size_t n : {0u, 1u, 7u, 255u, 256u, 257u, 4096u, 1000000u}) {
    for (std::size_t offset : {0u, 1u}) {
      INFO("n = " << n << ", buffers offset by " << offset << " bytes");
      const std::vector<float> x = wide_range_values(n, n + 17);
      Buffer<float> in(x, offset), out(n, offset + 2);
      Buffer<std::uint16_t> half(n, offset);

      // binary16 has an 11-bit significand: relative error <= 2^-11 in its normal range,
      // and every value here is in it.
      cpu::f32_to_f16(n, in.data(), half.data());
      CHECK(cpu::f16_all_finite(n, half.data()));
      cpu::f16_to_f32(n, half.data(), out.data());
      std::vector<float> y = out.values();
      std::size_t bad = 0;
      for (std::size_t i = 0; i < n; ++i)
        if (!(std::fabs(y[i] - x[i]) <= std::ldexp(std::fabs(x[i]), -11))) ++bad;
      CHECK(bad == 0);

      // bfloat16 has an 8-bit significand: relative error <= 2^-8.
      cpu::f32_to_bf16(n, in.data(), half.data());
      CHECK(cpu::bf16_all_finite(n, half.data()));
      cpu::bf16_to_f32(n, half.data(), out.data());
      y = out.values();
      bad = 0;
      for (std::size_t i = 0; i < n; ++i)
        if (!(std::fabs(y[i] - x[i]) <= std::ldexp(std::fabs(x[i]), -8))) ++bad;
      CHECK(bad == 0);

      // int8: |error| <= scale/2 in exact arithmetic. The quotient x/scale and the product
      // q*scale are each rounded once in f32 (relative 2^-24, on values up to 127), which
      // adds at most 254 * 2^-24 * scale: hence the 2^-14 relative slack on the bound.
      const std::size_t chunks = (n + kChunk - 1) / kChunk;
      Buffer<std::int8_t> q(n, offset);
      Buffer<float> scales(chunks, offset + 3);
      cpu::f32_to_int8(n, kChunk, in.data(), q.data(), scales.data());
      cpu::int8_to_f32(n, kChunk, q.data(), scales.data(), out.data());
      y = out.values();
      const std::vector<float> s = scales.values();
      bad = 0;
      for (std::size_t c = 0; c < chunks; ++c) {
        float max_abs = 0;
        for (std::size_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i)
          max_abs = std::max(max_abs, std::fabs(x[i]));
        CHECK(s[c] == max_abs / 127.0f);
        for (std::size_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i)
          if (!(std::fabs(y[i] - x[i]) <= 0.5 * s[c] * (1 + 0x1p-14))) ++bad;
      }
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("every binary16 value survives f16 -> f32 -> f16 unchanged", "[convert]") {
  std::vector<std::uint16_t> all(65536);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i);
  std::vector<float> wide(all.size());
  cpu::f16_to_f32(all.size(), all.data(), wide.data());
  std::vector<std::uint16_t> back(all.size());
  cpu::f32_to_f16(all.size(), wide.data(), back.data());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const bool nan = (i & 0x7C00) == 0x7C00 && (i & 0x03FF) != 0;
    // A NaN comes back quiet (bit 9 set) with its payload.
    const std::uint16_t expect = nan ? static_cast<std::uint16_t>(i | 0x0200) : all[i];
    if (back[i] != expect) ++bad;
  }
  CHECK(bad == 0);
}

TEST_CASE("the dispatched kernels agree bit for bit with the portable ones", "[convert]") {
  if (std::strcmp(cpu::convert_implementation(), "portable") == 0)
    WARN("this CPU lacks AVX-512 F/BW/VL: the dispatched kernels are the portable ones");

  SECTION("on every binary16 and bfloat16 input") {
    std::vector<std::uint16_t> all(65536);
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i);
    std::vector<float> fast(all.size()), slow(all.size());
    cpu::f16_to_f32(all.size(), all.data(), fast.data());
    cpu::portable::f16_to_f32(all.size(), all.data(), slow.data());
    CHECK(same_bits(fast, slow));
    cpu::bf16_to_f32(all.size(), all.data(), fast.data());
    cpu::portable::bf16_to_f32(all.size(), all.data(), slow.data());
    CHECK(same_bits(fast, slow));
    for (std::size_t i = 0; i < all.size(); ++i) {
      INFO("encoded value " << i);
      REQUIRE(cpu::f16_all_finite(1, &all[i]) == cpu::portable::f16_all_finite(1, &all[i]));
      REQUIRE(cpu::bf16_all_finite(1, &all[i]) == cpu::portable::bf16_all_finite(1, &all[i]));
      REQUIRE(cpu::f16_all_finite(1, &all[i]) == ((i & 0x7C00) != 0x7C00));
    }
  }

  SECTION("on every f32 sign/exponent/top-mantissa pattern with the rounding-critical low bits") {
    // binary16 keeps the upper 19 bits: all of them, times low bits around the tie point.
    std::vector<float> x;
    for (std::uint32_t top = 0; top < (1u << 19); ++top)
      for (std::uint32_t low : {0x0000u, 0x0001u, 0x0FFFu, 0x1000u, 0x1001u, 0x1FFFu})
        x.push_back(f32((top << 13) | low));
    std::vector<std::uint16_t> fast(x.size()), slow(x.size());
    cpu::f32_to_f16(x.size(), x.data(), fast.data());
    cpu::portable::f32_to_f16(x.size(), x.data(), slow.data());
    CHECK(same_bits(fast, slow));
    // bfloat16 keeps the upper 16 bits.
    x.clear();
    for (std::uint32_t top = 0; top < (1u << 16); ++top)
      for (std::uint32_t low : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu})
        x.push_back(f32((top << 16) | low));
    fast.resize(x.size());
    slow.resize(x.size());
    cpu::f32_to_bf16(x.size(), x.data(), fast.data());
    cpu::portable::f32_to_bf16(x.size(), x.data(), slow.data());
    CHECK(same_bits(fast, slow));
  }

  SECTION("on random data with special values, every tail length and misalignment") {
    for (std::size_t n :
         {1u, 7u, 15u, 16u, 17u, 31u, 32u, 33u, 63u, 64u, 65u, 255u, 256u, 257u, 4096u, 100003u}) {
      for (std::size_t offset : {0u, 1u, 2u, 3u}) {
        INFO("n = " << n << ", offset " << offset);
        const std::vector<float> x = nasty_values(n, 1000 * n + offset);
        Buffer<float> in(x, offset);
        Buffer<std::uint16_t> fast16(n, offset), slow16(n, offset);
        cpu::f32_to_f16(n, in.data(), fast16.data());
        cpu::portable::f32_to_f16(n, in.data(), slow16.data());
        REQUIRE(same_bits(fast16.values(), slow16.values()));
        CHECK(cpu::f16_all_finite(n, fast16.data()) == cpu::portable::f16_all_finite(n, fast16.data()));

        Buffer<float> fast32(n, offset + 1), slow32(n, offset + 1);
        cpu::f16_to_f32(n, fast16.data(), fast32.data());
        cpu::portable::f16_to_f32(n, fast16.data(), slow32.data());
        REQUIRE(same_bits(fast32.values(), slow32.values()));

        cpu::f32_to_bf16(n, in.data(), fast16.data());
        cpu::portable::f32_to_bf16(n, in.data(), slow16.data());
        REQUIRE(same_bits(fast16.values(), slow16.values()));
        CHECK(cpu::bf16_all_finite(n, fast16.data()) == cpu::portable::bf16_all_finite(n, fast16.data()));
        cpu::bf16_to_f32(n, fast16.data(), fast32.data());
        cpu::portable::bf16_to_f32(n, fast16.data(), slow32.data());
        REQUIRE(same_bits(fast32.values(), slow32.values()));

        // int8 with chunk sizes that do and do not divide the vector width; the nasty
        // values put NaN and inf into some chunks, random normals fill the rest.
        for (std::size_t chunk : {kChunk, std::size_t{7}, std::size_t{16}, std::size_t{1000}}) {
          std::vector<float> mixed = wide_range_values(n, n + chunk);
          for (std::size_t i = 0; i < n; i += 97) mixed[i] = x[i];
          Buffer<float> mixed_in(mixed, offset);
          const std::size_t chunks = (n + chunk - 1) / chunk;
          Buffer<std::int8_t> fast_q(n, offset), slow_q(n, offset);
          Buffer<float> fast_s(chunks, offset), slow_s(chunks, offset);
          cpu::f32_to_int8(n, chunk, mixed_in.data(), fast_q.data(), fast_s.data());
          cpu::portable::f32_to_int8(n, chunk, mixed_in.data(), slow_q.data(), slow_s.data());
          REQUIRE(same_bits(fast_q.values(), slow_q.values()));
          REQUIRE(same_bits(fast_s.values(), slow_s.values()));
          cpu::int8_to_f32(n, chunk, fast_q.data(), fast_s.data(), fast32.data());
          cpu::portable::int8_to_f32(n, chunk, fast_q.data(), fast_s.data(), slow32.data());
          REQUIRE(same_bits(fast32.values(), slow32.values()));
        }
      }
    }
  }
}

TEST_CASE("all_finite finds an inf or NaN code at any position", "[convert]") {
  for (std::size_t n : {1u, 31u, 32u, 33u, 64u, 65u, 100u, 1000u}) {
    for (std::size_t offset : {0u, 1u}) {
      // Large finite codes (finite in both formats), both signs: must count as finite.
      std::vector<std::uint16_t> clean(n);
      for (std::size_t i = 0; i < n; ++i) clean[i] = static_cast<std::uint16_t>(i % 2 ? 0x7B7F : 0xFB7F);
      Buffer<std::uint16_t> buf(clean, offset);
      CHECK(cpu::f16_all_finite(n, buf.data()));
      CHECK(cpu::bf16_all_finite(n, buf.data()));
      for (std::size_t at = 0; at < n; ++at) {
        INFO("n = " << n << ", offset " << offset << ", special at " << at);
        for (std::uint16_t special : {0x7C00, 0xFC00, 0x7E01}) {
          std::vector<std::uint16_t> v = clean;
          v[at] = special;
          Buffer<std::uint16_t> b(v, offset);
          REQUIRE_FALSE(cpu::f16_all_finite(n, b.data()));
          REQUIRE_FALSE(cpu::portable::f16_all_finite(n, b.data()));
        }
        for (std::uint16_t special : {0x7F80, 0xFF80, 0x7FC1}) {
          std::vector<std::uint16_t> v = clean;
          v[at] = special;
          Buffer<std::uint16_t> b(v, offset);
          REQUIRE_FALSE(cpu::bf16_all_finite(n, b.data()));
          REQUIRE_FALSE(cpu::portable::bf16_all_finite(n, b.data()));
        }
      }
    }
  }
  CHECK(cpu::f16_all_finite(0, nullptr));
  CHECK(cpu::bf16_all_finite(0, nullptr));
}
