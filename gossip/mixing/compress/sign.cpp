#include <cmath>

#include "gossip/mixing/compress/compressors.hpp"
#include "gossip/mixing/compress/payload_bytes.hpp"

namespace hearsay::compress {
namespace {

// Payload: the common start, u32 blocks, blocks x f32 scales (each >= 0, finite), then
// ceil(n / 8) bytes of signs: bit i % 8 of byte i / 8 set when value i is negative.
// Value i decodes to -scale or +scale of its block (0 counts as positive).
class Sign final : public Compressor {
 public:
  Sign(std::uint64_t n, std::span<const std::uint64_t> tensor_sizes)
      : Compressor(n), blocks_(block_lengths(n, tensor_sizes)) {}

  std::string spec() const override { return "sign"; }
  std::uint64_t payload_bytes() const override {
    return kCommonBytes + 4 + 4 * blocks_.size() + (size_ + 7) / 8;
  }

  std::vector<std::uint8_t> encode(std::span<const float> v, std::uint64_t) const override {
    if (v.size() != size_) throw std::invalid_argument(spec() + ": encode of the wrong length");
    PayloadWriter out(payload_bytes());
    out.start(CompressorId::sign, size_);
    out.put<std::uint32_t>(static_cast<std::uint32_t>(blocks_.size()));
    std::uint64_t at = 0;
    for (const auto len : blocks_) {  // the block's mean magnitude minimises its squared error
      double sum = 0;
      for (std::uint64_t i = at; i < at + len; ++i) sum += std::fabs(v[i]);
      out.put<float>(static_cast<float>(sum / static_cast<double>(len)));
      at += len;
    }
    std::vector<std::uint8_t> bits((size_ + 7) / 8, 0);
    for (std::uint64_t i = 0; i < size_; ++i)
      if (std::signbit(v[i]) && v[i] != 0.0f) bits[i / 8] |= static_cast<std::uint8_t>(1u << (i % 8));
    out.put_all<std::uint8_t>(bits);
    return std::move(out).take();
  }

  std::optional<Refusal> add_decoded(std::span<const std::uint8_t> payload,
                                     std::span<float> into) const override {
    PayloadReader in(payload);
    if (auto bad = check_start(in, CompressorId::sign, size_)) return bad;
    ScaledBlocks read;
    if (auto bad =
            read_scaled_blocks(in, payload.size(), blocks_.size(), (size_ + 7) / 8, spec(), "signs", read))
      return bad;
    const auto blocks = static_cast<std::uint32_t>(blocks_.size());
    const std::span<const std::uint8_t> scales = read.scales, bits = read.codes;
    if (into.size() != size_) throw std::invalid_argument(spec() + ": decode into the wrong length");
    std::uint64_t i = 0;
    for (std::uint32_t b = 0; b < blocks; ++b) {
      const float s = value_at<float>(scales, b);
      for (const auto end = i + blocks_[b]; i < end; ++i) into[i] += (bits[i / 8] >> (i % 8)) & 1u ? -s : s;
    }
    return std::nullopt;
  }

 private:
  const std::vector<std::uint32_t> blocks_;
};

}  // namespace

std::unique_ptr<Compressor> make_sign(std::uint64_t n, std::span<const std::uint64_t> tensor_sizes) {
  return std::make_unique<Sign>(n, tensor_sizes);
}

}  // namespace hearsay::compress
