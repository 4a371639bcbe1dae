// Payload frames: encode/decode round trips in every dtype within each dtype's error
// bound, unaligned payloads, and non-finite values refused before decoding.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "base/rng.hpp"
#include "gossip/network/wire/payload.hpp"

using namespace hearsay::wire;

namespace {

std::vector<float> random_values(std::size_t n, std::uint64_t seed) {
  hearsay::Rng rng(seed);
  std::vector<float> v(n);
  // Spread over several binades, with some exact zeros, as trained parameters are.
  for (std::size_t i = 0; i < n; ++i)
    v[i] = i % 97 == 5 ? 0.0f : static_cast<float>(rng.normal() * std::pow(2.0, static_cast<int>(i % 9) - 4));
  return v;
}

// Largest |decoded - x| each dtype may produce for element i.
double allowed_error(Dtype d, const std::vector<float>& x, std::size_t i) {
  const double a = std::abs(static_cast<double>(x[i]));
  switch (d) {
    case Dtype::f32:
      return 0.0;
    // Round to nearest with an 11-bit significand: relative 2^-11. Below the smallest
    // normal f16 (2^-14) the spacing is fixed at 2^-24, so the error is at most 2^-25.
    case Dtype::f16:
      return std::max(a * std::ldexp(1.0, -11), std::ldexp(1.0, -25));
    // 8-bit significand, f32's exponent range: relative 2^-8 everywhere we generate.
    case Dtype::bf16:
      return a * std::ldexp(1.0, -8);
    case Dtype::int8: {
      // Half a quantisation step of the element's chunk (scale = max|x| / 127), plus a
      // few float ulps of slack for the division and multiplication in f32.
      const std::size_t begin = i / kInt8Chunk * kInt8Chunk;
      const std::size_t end = std::min(x.size(), begin + kInt8Chunk);
      double max_abs = 0.0;
      for (std::size_t j = begin; j < end; ++j)
        max_abs = std::max(max_abs, std::abs(static_cast<double>(x[j])));
      const double scale = max_abs / 127.0;
      return scale / 2.0 + max_abs * 4.0 * std::numeric_limits<float>::epsilon();
    }
    case Dtype::none:
    case Dtype::compressed:  // a compressor's (test_compressors.cpp)
      break;
  }
  return 0.0;
}

std::vector<std::uint8_t> encoded(Dtype d, const std::vector<float>& x) {
  std::vector<std::uint8_t> payload(*payload_bytes(d, x.size()));
  encode_values(d, x, payload);
  return payload;
}

void put_f32(std::vector<std::uint8_t>& payload, std::size_t byte_offset, float value) {
  std::memcpy(payload.data() + byte_offset, &value, sizeof value);
}

}  // namespace

TEST_CASE("payloads round-trip in every dtype within the dtype's bound", "[wire][slow]") {
  for (Dtype d : {Dtype::f32, Dtype::f16, Dtype::bf16, Dtype::int8}) {
    for (std::size_t n : {0u, 1u, 7u, 4096u, 10'000'000u}) {
      INFO(to_string(d) << " n=" << n);
      const auto x = random_values(n, 1000 + n);
      const auto payload = encoded(d, x);
      REQUIRE_FALSE(check_values(d, n, payload).has_value());
      std::vector<float> y(n, std::nanf(""));
      decode_values(d, payload, y);
      std::size_t worst = 0;
      double worst_excess = -1.0;
      for (std::size_t i = 0; i < n; ++i) {
        const double excess = std::abs(static_cast<double>(y[i]) - x[i]) - allowed_error(d, x, i);
        if (excess > worst_excess || std::isnan(excess)) {
          worst_excess = std::isnan(excess) ? 1.0 : excess;
          worst = i;
        }
      }
      if (n > 0) {
        INFO("worst element " << worst << ": sent " << x[worst] << ", got " << y[worst]);
        REQUIRE(worst_excess <= 0.0);
      }
    }
  }
}

TEST_CASE("payload bytes are little-endian and follow the documented layouts", "[wire]") {
  const std::vector<float> x = {0.5f, -2.0f};
  REQUIRE(encoded(Dtype::f32, x) ==
          std::vector<std::uint8_t>{0x00, 0x00, 0x00, 0x3f, 0x00, 0x00, 0x00, 0xc0});
  // bf16 is the top half of the f32; f16 0.5 is 0x3800, -2.0 is 0xc000.
  REQUIRE(encoded(Dtype::bf16, x) == std::vector<std::uint8_t>{0x00, 0x3f, 0x00, 0xc0});
  REQUIRE(encoded(Dtype::f16, x) == std::vector<std::uint8_t>{0x00, 0x38, 0x00, 0xc0});
  // int8: max|x| = 2 so scale = 2/127; q = {32 (31.75 rounded), -127}; then the scale,
  // the block's length - 1 and the number of blocks.
  const auto q = encoded(Dtype::int8, x);
  REQUIRE(q.size() == 11);
  REQUIRE(static_cast<std::int8_t>(q[0]) == 32);
  REQUIRE(static_cast<std::int8_t>(q[1]) == -127);
  float scale;
  std::memcpy(&scale, q.data() + 2, 4);
  REQUIRE(scale == 2.0f / 127.0f);
  REQUIRE(q[6] == 1);
  REQUIRE(std::vector<std::uint8_t>(q.begin() + 7, q.end()) == std::vector<std::uint8_t>{1, 0, 0, 0});
}

TEST_CASE("int8 blocks cut at the tensors give each tensor its own scale", "[wire]") {
  // A counter of 234, 32 values near 0.01 and 300 near 1, as BatchNorm's buffers and a
  // layer's weights lie.
  std::vector<float> x(333);
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = i == 0    ? 234.0f
           : i <= 32 ? 0.01f * std::sin(static_cast<float>(i))
                     : std::cos(static_cast<float>(i));
  const std::vector<std::uint64_t> tensors = {1, 32, 300};
  const auto blocks = int8_blocks(x.size(), tensors);
  REQUIRE(blocks == std::vector<std::uint32_t>{1, 32, 256, 44});
  std::vector<std::uint8_t> payload(encoded_bytes(Dtype::int8, x.size(), blocks));
  REQUIRE(payload.size() == int8_payload_bytes(333, 4));
  encode_values(Dtype::int8, x, payload, blocks);
  REQUIRE_FALSE(check_values(Dtype::int8, x.size(), payload).has_value());
  std::vector<float> y(x.size());
  decode_values(Dtype::int8, payload, y);
  // Each element within half a step of its own block's scale; the counter exactly (one
  // value is its block's largest: q = 127).
  std::size_t at = 0;
  for (const auto len : blocks) {
    double max_abs = 0;
    for (std::size_t i = at; i < at + len; ++i) max_abs = std::max(max_abs, std::abs(double{x[i]}));
    for (std::size_t i = at; i < at + len; ++i) {
      INFO("element " << i);
      CHECK(std::abs(double{x[i]} - y[i]) <=
            max_abs / 127 / 2 + max_abs * 4 * std::numeric_limits<float>::epsilon());
    }
    at += len;
  }
  CHECK(std::abs(y[0] - 234.0f) <= 234.0f * 4 * std::numeric_limits<float>::epsilon());
  // In default blocks the counter sets the small values' step to 1.8: they decode to 0.
  const auto plain = encoded(Dtype::int8, x);
  decode_values(Dtype::int8, plain, y);
  for (std::size_t i = 1; i <= 32; ++i) CHECK(y[i] == 0.0f);
}

TEST_CASE("int8 payloads whose blocks do not tile their values are refused", "[wire]") {
  std::vector<float> x(300, 0.5f);
  const std::vector<std::uint32_t> blocks = {100, 200};
  std::vector<std::uint8_t> good(encoded_bytes(Dtype::int8, x.size(), blocks));
  REQUIRE_THROWS_AS(encode_values(Dtype::int8, x, good, std::vector<std::uint32_t>{100, 300}),
                    std::invalid_argument);  // a block over 256
  REQUIRE_THROWS_AS(encode_values(Dtype::int8, x, good, std::vector<std::uint32_t>{0, 300}),
                    std::invalid_argument);
  REQUIRE_THROWS_AS(encode_values(Dtype::int8, x, good, std::vector<std::uint32_t>{100, 100}),
                    std::invalid_argument);  // the wrong size for these blocks
  encode_values(Dtype::int8, x, good, blocks);
  REQUIRE_FALSE(check_values(Dtype::int8, x.size(), good).has_value());
  SECTION("lengths that add up to more or less than the values") {
    auto bad = good;
    REQUIRE(bad[300 + 8] == 99);  // the lengths (minus 1) follow the two scales
    REQUIRE(bad[300 + 9] == 199);
    bad[300 + 9] = 98;  // the second block: 99 values, 199 in all
    CHECK(check_values(Dtype::int8, x.size(), bad) == DropReason::size_mismatch);
    std::vector<float> y(x.size());
    CHECK_THROWS_AS(decode_values(Dtype::int8, bad, y), std::invalid_argument);
  }
  SECTION("a block count that is not the frame's") {
    auto bad = good;
    bad[bad.size() - 4] = 3;
    CHECK(check_values(Dtype::int8, x.size(), bad) == DropReason::size_mismatch);
  }
  SECTION("a frame of the wrong length") {
    auto bad = good;
    bad.push_back(0);
    CHECK(check_values(Dtype::int8, x.size(), bad) == DropReason::size_mismatch);
  }
}

TEST_CASE("block plans: tensors split at the cap, and a region's share of the tensors", "[wire]") {
  REQUIRE(split_blocks(10, std::vector<std::uint64_t>{3, 7}, 4) == std::vector<std::uint32_t>{3, 4, 3});
  REQUIRE(split_blocks(10, {}, 4) == std::vector<std::uint32_t>{4, 4, 2});
  REQUIRE_THROWS_AS(split_blocks(10, std::vector<std::uint64_t>{3, 6}, 4), std::invalid_argument);
  REQUIRE(tensor_sizes_within(std::vector<std::uint64_t>{3, 5, 2}, 2, 5) == std::vector<std::uint64_t>{1, 4});
  REQUIRE(tensor_sizes_within(std::vector<std::uint64_t>{3, 5, 2}, 8, 2) == std::vector<std::uint64_t>{2});
  REQUIRE(tensor_sizes_within({}, 8, 2).empty());
  REQUIRE_THROWS_AS(tensor_sizes_within(std::vector<std::uint64_t>{3, 5, 2}, 8, 3), std::invalid_argument);
}

TEST_CASE("payloads at odd addresses decode like aligned ones", "[wire]") {
  for (Dtype d : {Dtype::f32, Dtype::f16, Dtype::bf16, Dtype::int8}) {
    INFO(to_string(d));
    const auto x = random_values(1000, 7);
    const auto payload = encoded(d, x);
    std::vector<std::uint8_t> shifted(payload.size() + 3);
    for (std::size_t shift = 1; shift <= 3; ++shift) {
      std::memcpy(shifted.data() + shift, payload.data(), payload.size());
      const std::span<const std::uint8_t> view(shifted.data() + shift, payload.size());
      REQUIRE_FALSE(check_values(d, x.size(), view).has_value());
      std::vector<float> a(x.size()), b(x.size());
      decode_values(d, payload, a);
      decode_values(d, view, b);
      REQUIRE(a == b);
    }
  }
}

TEST_CASE("NaN and Inf anywhere in a payload are non_finite", "[wire]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::size_t n = 3000;  // several check blocks and int8 chunks
  const auto x = random_values(n, 3);
  for (std::size_t at : {0ul, 1023ul, 1024ul, n - 1}) {
    for (float bad : {nan, inf, -inf}) {
      INFO("element " << at << " = " << bad);
      auto f32 = encoded(Dtype::f32, x);
      put_f32(f32, at * 4, bad);
      REQUIRE(check_values(Dtype::f32, n, f32) == DropReason::non_finite);
      // The same, one byte off alignment.
      std::vector<std::uint8_t> odd(f32.size() + 1);
      std::memcpy(odd.data() + 1, f32.data(), f32.size());
      REQUIRE(check_values(Dtype::f32, n, std::span(odd).subspan(1)) == DropReason::non_finite);
    }
    for (std::uint16_t bits : {0x7c00, 0xfc00, 0x7e00, 0x7c01}) {  // f16 +inf, -inf, NaN, signalling NaN
      auto f16 = encoded(Dtype::f16, x);
      f16[at * 2] = bits & 0xff;
      f16[at * 2 + 1] = bits >> 8;
      REQUIRE(check_values(Dtype::f16, n, f16) == DropReason::non_finite);
    }
    for (std::uint16_t bits : {0x7f80, 0xff80, 0x7fc0, 0xffc1}) {  // bf16 +inf, -inf, NaNs
      auto bf16 = encoded(Dtype::bf16, x);
      bf16[at * 2] = bits & 0xff;
      bf16[at * 2 + 1] = bits >> 8;
      REQUIRE(check_values(Dtype::bf16, n, bf16) == DropReason::non_finite);
    }
  }
  // int8: the values are plain integers; the scales must be finite and >= 0.
  const std::size_t chunks = (n + kInt8Chunk - 1) / kInt8Chunk;
  for (std::size_t chunk : {0ul, chunks - 1}) {
    for (float bad : {nan, inf, -inf, -0.5f}) {
      INFO("scale " << chunk << " = " << bad);
      auto q = encoded(Dtype::int8, x);
      put_f32(q, n + chunk * 4, bad);
      REQUIRE(check_values(Dtype::int8, n, q) == DropReason::non_finite);
    }
  }
  // The extremes that are finite pass.
  const std::vector<float> extremes = {std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                                       std::numeric_limits<float>::denorm_min(), -0.0f};
  REQUIRE_FALSE(check_values(Dtype::f32, 4, encoded(Dtype::f32, extremes)).has_value());
}

TEST_CASE("check_values refuses sizes and dtypes that do not match", "[wire]") {
  const auto payload = encoded(Dtype::f32, {1.0f, 2.0f});
  REQUIRE(check_values(Dtype::f32, 3, payload) == DropReason::size_mismatch);
  REQUIRE(check_values(Dtype::f32, 1ull << 62, payload) == DropReason::size_mismatch);
  REQUIRE(check_values(Dtype::none, 2, payload) == DropReason::bad_dtype);
  REQUIRE(check_values(static_cast<Dtype>(9), 2, payload) == DropReason::bad_dtype);
  REQUIRE_FALSE(check_values(Dtype::none, 0, {}).has_value());
}

TEST_CASE("encode_values and decode_values refuse mismatched buffers", "[wire]") {
  std::vector<float> x(4, 1.0f);
  std::vector<std::uint8_t> small(15);
  REQUIRE_THROWS_AS(encode_values(Dtype::f32, x, small), std::invalid_argument);
  REQUIRE_THROWS_AS(decode_values(Dtype::f32, small, x), std::invalid_argument);
  REQUIRE_THROWS_AS(encode_values(Dtype::none, x, {}), std::invalid_argument);
}

TEST_CASE("check_payload finds the same faults as checksum plus check_values, in one pass", "[wire]") {
  // Sizes around the 128 KiB block of the one-pass walk: below it the plain path, above
  // it blocks with a short last one; odd element counts too.
  for (const Dtype d : {Dtype::f32, Dtype::f16, Dtype::bf16, Dtype::int8}) {
    for (const std::size_t count :
         {std::size_t{1000}, std::size_t{32768}, std::size_t{100'003}, std::size_t{300'001}}) {
      std::vector<float> values(count);
      for (std::size_t i = 0; i < count; ++i) values[i] = static_cast<float>(i % 97) - 48.0f;
      std::vector<std::uint8_t> bytes(*payload_bytes(d, count));
      encode_values(d, values, bytes);
      Header h;
      h.dtype = d;
      h.count = count;
      h.checksum = checksum(bytes);
      INFO(to_string(d) << " x " << count);
      CHECK_FALSE(check_payload(h, bytes).has_value());

      // One flipped bit anywhere (here: the last byte) is a checksum failure.
      std::vector<std::uint8_t> flipped = bytes;
      flipped.back() ^= 1;
      CHECK(check_payload(h, flipped) == DropReason::bad_checksum);

      if (d == Dtype::int8) continue;  // int8 values are integers; only scales can be non-finite
      // A NaN in the last block with a matching checksum is non_finite ...
      std::vector<std::uint8_t> poisoned = bytes;
      const std::size_t at = (count - 1) * (d == Dtype::f32 ? 4 : 2);
      if (d == Dtype::f32) {
        const float nan = std::numeric_limits<float>::quiet_NaN();
        std::memcpy(poisoned.data() + at, &nan, 4);
      } else {
        const std::uint16_t nan = d == Dtype::f16 ? 0x7e00 : 0x7fc0;  // quiet NaN of each format
        std::memcpy(poisoned.data() + at, &nan, 2);
      }
      Header poisoned_header = h;
      poisoned_header.checksum = checksum(poisoned);
      CHECK(check_payload(poisoned_header, poisoned) == DropReason::non_finite);
      CHECK(check_values(d, count, poisoned) == DropReason::non_finite);
      // ... and with a wrong checksum as well, the checksum is the reason given.
      CHECK(check_payload(h, poisoned) == DropReason::bad_checksum);
    }
  }
  Header h;
  h.dtype = Dtype::f32;
  h.count = 300'000;
  std::vector<std::uint8_t> short_frame(4 * 300'000 - 4);
  CHECK(check_payload(h, short_frame) == DropReason::size_mismatch);
}
