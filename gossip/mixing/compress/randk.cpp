#include <cmath>

#include "gossip/mixing/compress/compressors.hpp"
#include "gossip/mixing/compress/payload_bytes.hpp"

namespace hearsay::compress {
namespace {

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// k distinct indices of [0, n), ascending, from seed alone (Floyd's sampling: each k-set as
// likely). Integer arithmetic only, so every machine draws the same set.
std::vector<std::uint32_t> draw_indices(std::uint64_t seed, std::uint64_t k, std::uint64_t n) {
  std::vector<std::uint8_t> taken(n, 0);
  std::uint64_t state = seed;
  for (std::uint64_t j = n - k; j < n; ++j) {
    // uniform in [0, j]: the high half of a 64 x 64-bit product (Lemire)
    const auto t =
        static_cast<std::uint64_t>((static_cast<unsigned __int128>(splitmix64(state)) * (j + 1)) >> 64);
    if (taken[t])
      taken[j] = 1;
    else
      taken[t] = 1;
  }
  std::vector<std::uint32_t> out;
  out.reserve(k);
  for (std::uint64_t i = 0; i < n; ++i)
    if (taken[i]) out.push_back(static_cast<std::uint32_t>(i));
  return out;
}

// Payload: the common start, u32 k, u32 0, u64 seed, k x f32 (the values at the drawn
// indices, in index order).
class RandK final : public Compressor {
 public:
  RandK(double percent, std::uint64_t n) : Compressor(n), percent_(percent), k_(kept_count(percent, n)) {}

  std::string spec() const override { return "randk:" + percent_text(percent_); }
  std::uint64_t payload_bytes() const override { return kCommonBytes + 16 + 4 * k_; }

  std::vector<std::uint8_t> encode(std::span<const float> v, std::uint64_t seed) const override {
    if (v.size() != size_) throw std::invalid_argument(spec() + ": encode of the wrong length");
    PayloadWriter out(payload_bytes());
    out.start(CompressorId::randk, size_);
    out.put<std::uint32_t>(static_cast<std::uint32_t>(k_));
    out.put<std::uint32_t>(0);
    out.put<std::uint64_t>(seed);
    for (const auto i : draw_indices(seed, k_, size_)) out.put<float>(v[i]);
    return std::move(out).take();
  }

  std::optional<Refusal> add_decoded(std::span<const std::uint8_t> payload,
                                     std::span<float> into) const override {
    PayloadReader in(payload);
    if (auto bad = check_start(in, CompressorId::randk, size_)) return bad;
    std::uint32_t k = 0, zero = 1;
    std::uint64_t seed = 0;
    std::span<const std::uint8_t> values;
    if (!in.take(k) || !in.take(zero) || !in.take(seed) || k != k_ || zero != 0 || !in.skip(k, 4, values) ||
        in.left() != 0)
      return refuse(wire::DropReason::size_mismatch, spec(),
                    "a payload of " + std::to_string(payload.size()) + " bytes is not " + std::to_string(k_) +
                        " values and their seed");
    for (std::uint32_t j = 0; j < k; ++j)
      if (!std::isfinite(value_at<float>(values, j)))
        return refuse(wire::DropReason::non_finite, spec(), "value " + std::to_string(j) + " is not finite");
    if (into.size() != size_) throw std::invalid_argument(spec() + ": decode into the wrong length");
    const auto indices = draw_indices(seed, k_, size_);
    for (std::uint32_t j = 0; j < k; ++j) into[indices[j]] += value_at<float>(values, j);
    return std::nullopt;
  }

 private:
  const double percent_;
  const std::uint64_t k_;
};

}  // namespace

std::unique_ptr<Compressor> make_randk(double percent, std::uint64_t n) {
  return std::make_unique<RandK>(percent, n);
}

}  // namespace hearsay::compress
