#include "gossip/mixing/compress/compressor.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <stdexcept>
#include <variant>

#include "gossip/mixing/compress/compressors.hpp"
#include "gossip/mixing/compress/payload_bytes.hpp"
#include "gossip/network/wire/payload.hpp"

namespace hearsay::compress {

std::vector<std::uint32_t> block_lengths(std::uint64_t n, std::span<const std::uint64_t> tensor_sizes) {
  return wire::split_blocks(n, tensor_sizes, kMaxBlock);
}

std::uint64_t kept_count(double percent, std::uint64_t n) {
  const auto k = static_cast<std::uint64_t>(std::ceil(percent / 100.0 * static_cast<double>(n)));
  return std::clamp<std::uint64_t>(k, 1, std::max<std::uint64_t>(n, 1));
}

std::string percent_text(double percent) {
  char text[32];
  std::snprintf(text, sizeof text, "%g%%", percent);
  return text;
}

std::optional<Refusal> check_start(PayloadReader& in, CompressorId id, std::uint64_t n) {
  std::uint8_t got = 0, zero8 = 1;
  std::uint16_t zero16 = 1;
  std::uint32_t count = 0;
  if (!in.take(got) || !in.take(zero8) || !in.take(zero16) || !in.take(count))
    return Refusal{wire::DropReason::size_mismatch, "a compressed payload shorter than its 8-byte start"};
  if (got != static_cast<std::uint8_t>(id) || zero8 != 0 || zero16 != 0)
    return Refusal{wire::DropReason::bad_dtype, "compressor " + std::to_string(got) + ", this run's is " +
                                                    std::to_string(static_cast<int>(id)) +
                                                    " (do the peers' --compress agree?)"};
  if (count != n)
    return Refusal{wire::DropReason::size_mismatch,
                   "a payload of " + std::to_string(count) + " values, the model has " + std::to_string(n)};
  return std::nullopt;
}

std::optional<Refusal> read_scaled_blocks(PayloadReader& in, std::size_t payload_size, std::size_t blocks,
                                          std::uint64_t tail_bytes, const std::string& spec,
                                          const char* codes, ScaledBlocks& out) {
  std::uint32_t got = 0;
  if (!in.take(got) || got != blocks || !in.skip(blocks, 4, out.scales) ||
      !in.skip(tail_bytes, 1, out.codes) || in.left() != 0)
    return refuse(wire::DropReason::size_mismatch, spec,
                  "a payload of " + std::to_string(payload_size) + " bytes is not " + std::to_string(blocks) +
                      " scales and their " + codes);
  for (std::size_t b = 0; b < blocks; ++b) {
    const float s = value_at<float>(out.scales, b);
    if (!std::isfinite(s) || s < 0)
      return refuse(wire::DropReason::non_finite, spec,
                    "scale " + std::to_string(b) + " is not finite and >= 0");
  }
  return std::nullopt;
}

Refusal refuse(wire::DropReason reason, const std::string& spec, const std::string& detail) {
  return Refusal{reason, spec + ": " + detail};
}

namespace {

constexpr const char* kAccepted =
    "f32, f16, bf16, int8 (the values, any algorithm), topk:P%, randk:P%, sign, int4 (CHOCO's "
    "compressed differences, dpsgd), P in (0, 100], powergossip:R (dpsgd's rank-R projections of "
    "neighbour differences) or powersgd:R (all-reduce's rank-R updates), R in 1..32";

struct Spec {
  enum class Kind { topk, randk, sign, int4, powersgd, powergossip } kind;
  double percent = 0;
  int rank = 0;
};

// The spec's parts, or the message saying what is wrong.
std::variant<Spec, std::string> parse(std::string_view text) {
  const auto bad = [&](const std::string& why) {
    return std::variant<Spec, std::string>("--compress '" + std::string(text) + "': " + why);
  };
  if (text == "sign") return Spec{Spec::Kind::sign};
  if (text == "int4") return Spec{Spec::Kind::int4};
  for (const auto& [name, kind] : {std::pair{std::string_view("powersgd:"), Spec::Kind::powersgd},
                                   std::pair{std::string_view("powergossip:"), Spec::Kind::powergossip}}) {
    if (text.substr(0, name.size()) != name) continue;
    const std::string_view r = text.substr(name.size());
    int rank = 0;
    const auto [end, ec] = std::from_chars(r.data(), r.data() + r.size(), rank);
    if (r.empty() || ec != std::errc() || end != r.data() + r.size() || rank < 1 || rank > kMaxRank)
      return bad("the rank must be a whole number in 1.." + std::to_string(kMaxRank) + ", as in " +
                 std::string(name) + "2");
    return Spec{.kind = kind, .rank = rank};
  }
  for (const auto& [name, kind] : {std::pair{std::string_view("topk:"), Spec::Kind::topk},
                                   std::pair{std::string_view("randk:"), Spec::Kind::randk}}) {
    if (text.substr(0, name.size()) != name) continue;
    std::string_view p = text.substr(name.size());
    if (!p.empty() && p.back() == '%') p.remove_suffix(1);
    double percent = 0;
    const auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), percent);
    if (p.empty() || ec != std::errc() || end != p.data() + p.size() || !(percent > 0 && percent <= 100))
      return bad("the percentage kept must be a number in (0, 100], as in " + std::string(name) + "1%");
    return Spec{kind, percent};
  }
  return bad(std::string("is none of ") + kAccepted);
}

}  // namespace

bool is_difference_compressor(std::string_view spec) {
  const auto parsed = parse(spec);
  const auto* s = std::get_if<Spec>(&parsed);
  return s != nullptr && s->kind != Spec::Kind::powersgd && s->kind != Spec::Kind::powergossip;
}

bool coarse_consensus(std::string_view spec) {
  const auto parsed = parse(spec);
  const auto* s = std::get_if<Spec>(&parsed);
  return s != nullptr && s->kind != Spec::Kind::int4 && s->kind != Spec::Kind::powersgd;
}

namespace {

std::optional<int> rank_of(std::string_view spec, Spec::Kind kind) {
  const auto parsed = parse(spec);
  const auto* s = std::get_if<Spec>(&parsed);
  if (s == nullptr || s->kind != kind) return std::nullopt;
  return s->rank;
}

}  // namespace

std::optional<int> low_rank(std::string_view spec) { return rank_of(spec, Spec::Kind::powersgd); }
std::optional<int> power_gossip(std::string_view spec) { return rank_of(spec, Spec::Kind::powergossip); }

std::vector<std::uint64_t> sizes_of(std::span<const TensorShape> tensors) {
  std::vector<std::uint64_t> out;
  out.reserve(tensors.size());
  for (const auto& t : tensors) out.push_back(t.size());
  return out;
}

std::optional<std::string> check_compressor_spec(std::string_view spec) {
  const auto parsed = parse(spec);
  if (const auto* why = std::get_if<std::string>(&parsed)) return *why;
  return std::nullopt;
}

std::unique_ptr<Compressor> make_compressor(std::string_view spec, std::uint64_t n,
                                            std::span<const std::uint64_t> tensor_sizes) {
  const auto parsed = parse(spec);
  if (const auto* why = std::get_if<std::string>(&parsed)) throw std::invalid_argument(*why);
  if (n == 0 || n > 0xFFFFFFFFull)
    throw std::invalid_argument("--compress " + std::string(spec) + ": " + std::to_string(n) +
                                " values; a compressor takes 1 to 2^32 - 1");
  const Spec s = std::get<Spec>(parsed);
  switch (s.kind) {
    case Spec::Kind::topk:
      return make_topk(s.percent, n);
    case Spec::Kind::randk:
      return make_randk(s.percent, n);
    case Spec::Kind::sign:
      return make_sign(n, tensor_sizes);
    case Spec::Kind::int4:
      return make_int4(n, tensor_sizes);
    case Spec::Kind::powersgd:
    case Spec::Kind::powergossip:
      break;
  }
  if (s.kind == Spec::Kind::powersgd || s.kind == Spec::Kind::powergossip)
    throw std::invalid_argument("--compress " + std::string(spec) +
                                " is a low-rank projection (PowerSGD, PowerGossip), not a compressor of "
                                "differences");
  throw std::logic_error("make_compressor: a kind without a compressor");
}

}  // namespace hearsay::compress
