// The compressors of differences (gossip/mixing/compress): what each keeps, its error
// bound, that a payload decodes to the same bits wherever it is decoded, and that every
// malformed payload is refused without touching the values.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include "gossip/mixing/compress/compressor.hpp"

using namespace hearsay::compress;

namespace {

std::vector<float> random_values(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(gen);
  return v;
}

std::vector<float> decoded(const Compressor& c, const std::vector<std::uint8_t>& payload) {
  std::vector<float> out(c.size(), 0.0f);
  const auto refused = c.add_decoded(payload, out);
  REQUIRE_FALSE(refused.has_value());
  return out;
}

double squared(std::span<const float> v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return s;
}

double squared_error(std::span<const float> a, std::span<const float> b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    s += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
  return s;
}

const std::vector<std::string> kSpecs{"topk:1%", "topk:30%", "randk:1%", "randk:10%", "sign", "int4"};

}  // namespace

TEST_CASE("compressors: specs parse, and a bad one says what is accepted", "[compress]") {
  for (const auto& s : kSpecs) {
    CHECK(is_difference_compressor(s));
    CHECK(make_compressor(s, 1000)->spec() == s);
  }
  CHECK(make_compressor("topk:0.5", 1000)->spec() == "topk:0.5%");
  for (const std::string v : {"f32", "f16", "bf16", "int8"}) CHECK_FALSE(is_difference_compressor(v));
  for (const std::string bad :
       {"topk:0%", "topk:101%", "topk:", "topk:x%", "randk:-1%", "topk:1%%", "lowrank"})
    CHECK_THROWS_WITH(make_compressor(bad, 100), Catch::Contains("--compress '" + bad + "'"));
  CHECK_THAT(*check_compressor_spec("zip"), Catch::Contains("topk:P%, randk:P%, sign, int4"));
  CHECK_FALSE(check_compressor_spec("sign").has_value());
  CHECK_THROWS_AS(make_compressor("sign", 0), std::invalid_argument);
}

TEST_CASE("compressors: blocks follow the tensors, cut at kMaxBlock", "[compress]") {
  const std::vector<std::uint64_t> tensors{5000, 10, 4096};
  CHECK(block_lengths(9106, tensors) == std::vector<std::uint32_t>{4096, 904, 10, 4096});
  CHECK(block_lengths(10, {}) == std::vector<std::uint32_t>{10});
  CHECK_THROWS_WITH(block_lengths(9000, tensors), Catch::Contains("sum to 9106, not 9000"));
}

TEST_CASE("compressors: every payload is payload_bytes long and decodes to the same bits twice, added",
          "[compress]") {
  for (const std::size_t n : {1u, 7u, 1000u, 9001u}) {
    const auto v = random_values(n, 11 + static_cast<std::uint32_t>(n));
    for (const auto& s : kSpecs) {
      INFO(s << ", n " << n);
      const auto c = make_compressor(s, n);
      const auto payload = c->encode(v, 42);
      if (s.rfind("topk", 0) == 0 || s.rfind("randk", 0) == 0 || s == "sign" || s == "int4")
        CHECK(payload.size() == c->payload_bytes());
      const auto a = decoded(*c, payload), b = decoded(*c, payload);
      CHECK(std::memcmp(a.data(), b.data(), n * sizeof(float)) == 0);
      // Decoding adds: into a copy that starts at 1, each value is 1 + the decoded one.
      std::vector<float> ones(n, 1.0f);
      REQUIRE_FALSE(c->add_decoded(payload, ones).has_value());
      for (std::size_t i = 0; i < n; ++i) CHECK(ones[i] == 1.0f + a[i]);
      CHECK(c->encode(v, 42) == payload);  // deterministic
    }
  }
}

TEST_CASE("compressors: top-k keeps exactly the k largest magnitudes", "[compress]") {
  auto v = random_values(1000, 3);
  v[17] = 100.0f;
  v[500] = -100.0f;  // a tie in magnitude: both are kept
  const auto c = make_compressor("topk:1%", 1000);
  const auto d = decoded(*c, c->encode(v, 0));
  std::vector<float> sorted;
  for (float x : v) sorted.push_back(std::fabs(x));
  std::sort(sorted.rbegin(), sorted.rend());
  const float threshold = sorted[9];
  int kept = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (d[i] != 0.0f) {
      ++kept;
      CHECK(d[i] == v[i]);  // exact
      CHECK(std::fabs(v[i]) >= threshold);
    } else {
      CHECK(std::fabs(v[i]) <= threshold);
    }
  }
  CHECK(kept == 10);
  CHECK(d[17] == 100.0f);
  CHECK(d[500] == -100.0f);
  // Ties go to the lower index: ten equal values, three kept, the first three.
  const std::vector<float> flat(10, 2.0f);
  const auto d3 = decoded(*make_compressor("topk:30%", 10), make_compressor("topk:30%", 10)->encode(flat, 0));
  CHECK(d3 == std::vector<float>{2, 2, 2, 0, 0, 0, 0, 0, 0, 0});
  CHECK(squared_error(v, d) <= (1.0 - 10.0 / 1000.0) * squared(v));
}

TEST_CASE("compressors: rand-k keeps k values exactly at indices its seed draws", "[compress]") {
  const std::size_t n = 200;
  const auto v = random_values(n, 5);
  const auto c = make_compressor("randk:5%", n);
  std::vector<int> hits(n, 0);
  std::set<std::vector<float>> distinct;
  const int draws = 2000;
  for (int seed = 0; seed < draws; ++seed) {
    const auto d = decoded(*c, c->encode(v, static_cast<std::uint64_t>(seed)));
    int kept = 0;
    for (std::size_t i = 0; i < n; ++i)
      if (d[i] != 0.0f) {
        ++kept;
        ++hits[i];
        CHECK(d[i] == v[i]);
      }
    REQUIRE(kept == 10);
    distinct.insert(d);
  }
  CHECK(distinct.size() > draws / 2);  // the seed draws the set
  // Every index is as likely: 100 expected hits each; 5 standard deviations either side.
  for (std::size_t i = 0; i < n; ++i) {
    INFO("index " << i);
    CHECK(hits[i] > 50);
    CHECK(hits[i] < 150);
  }
}

TEST_CASE("compressors: sign sends the block's mean magnitude, int4 is within half a step", "[compress]") {
  const std::vector<std::uint64_t> tensors{300, 5000};
  auto v = random_values(5300, 9, 0.01f);
  for (std::size_t i = 300; i < 5300; ++i) v[i] *= 100.0f;  // a tensor of larger values: its own scale
  const auto sign = make_compressor("sign", 5300, tensors);
  const auto ds = decoded(*sign, sign->encode(v, 0));
  std::size_t at = 0;
  for (const auto len : block_lengths(5300, tensors)) {
    double sum = 0;
    for (std::size_t i = at; i < at + len; ++i) sum += std::fabs(v[i]);
    const auto mean = static_cast<float>(sum / len);
    for (std::size_t i = at; i < at + len; ++i) REQUIRE(ds[i] == (v[i] < 0 ? -mean : mean));
    // The mean minimises the block's error: ||v - d||^2 = ||v||^2 - len * mean^2.
    const std::span<const float> bv(v.data() + at, len), bd(ds.data() + at, len);
    CHECK(squared_error(bv, bd) ==
          Approx(squared(bv) - len * static_cast<double>(mean) * mean).epsilon(1e-4));
    at += len;
  }
  const auto int4 = make_compressor("int4", 5300, tensors);
  const auto d4 = decoded(*int4, int4->encode(v, 0));
  at = 0;
  for (const auto len : block_lengths(5300, tensors)) {
    float largest = 0;
    for (std::size_t i = at; i < at + len; ++i) largest = std::max(largest, std::fabs(v[i]));
    const float step = largest / 7.0f;
    for (std::size_t i = at; i < at + len; ++i) REQUIRE(std::fabs(v[i] - d4[i]) <= step * 0.5f * (1 + 1e-5f));
    at += len;
  }
  const std::vector<float> zeros(10, 0.0f);
  CHECK(decoded(*make_compressor("int4", 10), make_compressor("int4", 10)->encode(zeros, 0)) == zeros);
}

TEST_CASE("compressors: a malformed payload is refused and changes nothing", "[compress]") {
  const std::size_t n = 101;
  const auto v = random_values(n, 21);
  for (const auto& s : kSpecs) {
    INFO(s);
    const auto c = make_compressor(s, n);
    const auto good = c->encode(v, 7);
    std::vector<float> into(n, 3.0f);
    const auto untouched = into;
    // Every truncation, and one byte too many.
    for (std::size_t len = 0; len < good.size(); ++len) {
      const std::vector<std::uint8_t> cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(len));
      REQUIRE(c->add_decoded(cut, into).has_value());
    }
    auto longer = good;
    longer.push_back(0);
    CHECK(c->add_decoded(longer, into).has_value());
    // Another compressor's payload, and another model's length.
    for (const auto& other : kSpecs)
      if (other.substr(0, 4) != s.substr(0, 4)) {
        const auto refused = c->add_decoded(make_compressor(other, n)->encode(v, 7), into);
        REQUIRE(refused.has_value());
        CHECK_THAT(refused->detail, Catch::Contains("compressor") || Catch::Contains("bytes"));
      }
    const auto other_size = make_compressor(s, n + 1)->encode(random_values(n + 1, 2), 7);
    const auto refused = c->add_decoded(other_size, into);
    REQUIRE(refused.has_value());
    CHECK_THAT(refused->detail, Catch::Contains("102 values, the model has 101"));
    CHECK(into == untouched);
  }
  // Values that are not finite, indices out of order, a -8 nibble.
  const auto topk = make_compressor("topk:2%", n);  // k = 3: start 8, k 4, indices 12, values 12
  auto p = topk->encode(v, 0);
  std::vector<float> into(n, 0.0f);
  auto nan = p;
  const float q = std::nanf("");
  std::memcpy(nan.data() + 8 + 4 + 12, &q, 4);
  CHECK(topk->add_decoded(nan, into)->reason == hearsay::wire::DropReason::non_finite);
  auto swapped = p;
  std::swap_ranges(swapped.begin() + 12, swapped.begin() + 16, swapped.begin() + 16);
  CHECK_THAT(topk->add_decoded(swapped, into)->detail, Catch::Contains("out of range or order"));
  auto far = p;
  const std::uint32_t big = 5000;
  std::memcpy(far.data() + 12 + 8, &big, 4);
  CHECK(topk->add_decoded(far, into).has_value());
  const auto int4 = make_compressor("int4", n);
  auto eight = int4->encode(v, 0);
  eight.back() = 0x08;  // the last value (n odd: a low nibble alone) is -8
  CHECK_THAT(int4->add_decoded(eight, into)->detail, Catch::Contains("-8"));
  auto padded = int4->encode(v, 0);
  padded.back() |= 0x10;
  CHECK_THAT(int4->add_decoded(padded, into)->detail, Catch::Contains("padding"));
  CHECK(into == std::vector<float>(n, 0.0f));
}
