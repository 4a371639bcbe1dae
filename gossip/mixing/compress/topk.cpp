#include <algorithm>
#include <cmath>
#include <numeric>

#include "gossip/mixing/compress/compressors.hpp"
#include "gossip/mixing/compress/payload_bytes.hpp"

namespace hearsay::compress {
namespace {

// Payload: the common start, u32 k, k x u32 indices (strictly increasing, < n), k x f32.
class TopK final : public Compressor {
 public:
  TopK(double percent, std::uint64_t n) : Compressor(n), percent_(percent), k_(kept_count(percent, n)) {}

  std::string spec() const override { return "topk:" + percent_text(percent_); }
  std::uint64_t payload_bytes() const override { return kCommonBytes + 4 + 8 * k_; }

  std::vector<std::uint8_t> encode(std::span<const float> v, std::uint64_t) const override {
    if (v.size() != size_) throw std::invalid_argument(spec() + ": encode of the wrong length");
    std::vector<std::uint32_t> order(v.size());
    std::iota(order.begin(), order.end(), 0u);
    // Largest magnitude first, the lower index first among equals: the same set on every
    // machine, whatever the library's partition does with ties.
    const auto larger = [&](std::uint32_t a, std::uint32_t b) {
      const float ma = std::fabs(v[a]), mb = std::fabs(v[b]);
      return ma > mb || (ma == mb && a < b);
    };
    std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k_ - 1), order.end(), larger);
    order.resize(k_);
    std::sort(order.begin(), order.end());
    PayloadWriter out(payload_bytes());
    out.start(CompressorId::topk, size_);
    out.put<std::uint32_t>(static_cast<std::uint32_t>(k_));
    out.put_all<std::uint32_t>(order);
    for (const auto i : order) out.put<float>(v[i]);
    return std::move(out).take();
  }

  std::optional<Refusal> add_decoded(std::span<const std::uint8_t> payload,
                                     std::span<float> into) const override {
    PayloadReader in(payload);
    if (auto bad = check_start(in, CompressorId::topk, size_)) return bad;
    std::uint32_t k = 0;
    std::span<const std::uint8_t> indices, values;
    if (!in.take(k) || k != k_ || !in.skip(k, 4, indices) || !in.skip(k, 4, values) || in.left() != 0)
      return refuse(wire::DropReason::size_mismatch, spec(),
                    "a payload of " + std::to_string(payload.size()) + " bytes is not " + std::to_string(k_) +
                        " indices and values");
    for (std::uint32_t j = 0; j < k; ++j) {
      const auto i = value_at<std::uint32_t>(indices, j);
      if (i >= size_ || (j > 0 && i <= value_at<std::uint32_t>(indices, j - 1)))
        return refuse(
            wire::DropReason::size_mismatch, spec(),
            "index " + std::to_string(i) + " at place " + std::to_string(j) + " is out of range or order");
      if (!std::isfinite(value_at<float>(values, j)))
        return refuse(wire::DropReason::non_finite, spec(), "value " + std::to_string(j) + " is not finite");
    }
    if (into.size() != size_) throw std::invalid_argument(spec() + ": decode into the wrong length");
    for (std::uint32_t j = 0; j < k; ++j)
      into[value_at<std::uint32_t>(indices, j)] += value_at<float>(values, j);
    return std::nullopt;
  }

 private:
  const double percent_;
  const std::uint64_t k_;
};

}  // namespace

std::unique_ptr<Compressor> make_topk(double percent, std::uint64_t n) {
  return std::make_unique<TopK>(percent, n);
}

}  // namespace hearsay::compress
