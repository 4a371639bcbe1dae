#include <algorithm>
#include <cmath>

#include "gossip/mixing/compress/compressors.hpp"
#include "gossip/mixing/compress/payload_bytes.hpp"

namespace hearsay::compress {
namespace {

// Payload: the common start, u32 blocks, blocks x f32 scales (each >= 0, finite), then
// ceil(n / 2) bytes: value 2j in the low nibble of byte j, value 2j + 1 in its high
// nibble, each a 4-bit two's complement integer q in [-7, 7] (-8 is refused; the high
// nibble of a last odd byte is 0). Value i decodes to q x its block's scale.
class Int4 final : public Compressor {
 public:
  Int4(std::uint64_t n, std::span<const std::uint64_t> tensor_sizes)
      : Compressor(n), blocks_(block_lengths(n, tensor_sizes)) {}

  std::string spec() const override { return "int4"; }
  std::uint64_t payload_bytes() const override {
    return kCommonBytes + 4 + 4 * blocks_.size() + (size_ + 1) / 2;
  }

  std::vector<std::uint8_t> encode(std::span<const float> v, std::uint64_t) const override {
    if (v.size() != size_) throw std::invalid_argument(spec() + ": encode of the wrong length");
    PayloadWriter out(payload_bytes());
    out.start(CompressorId::int4, size_);
    out.put<std::uint32_t>(static_cast<std::uint32_t>(blocks_.size()));
    std::vector<std::uint8_t> nibbles((size_ + 1) / 2, 0);
    std::vector<float> scales;
    std::uint64_t at = 0;
    for (const auto len : blocks_) {
      float largest = 0;
      for (std::uint64_t i = at; i < at + len; ++i) largest = std::max(largest, std::fabs(v[i]));
      const float scale = largest / 7.0f;
      scales.push_back(scale);
      for (std::uint64_t i = at; i < at + len; ++i) {
        const float q = scale > 0 ? std::clamp(std::nearbyint(v[i] / scale), -7.0f, 7.0f) : 0.0f;
        const auto nibble = static_cast<std::uint8_t>(static_cast<int>(q) & 0xF);
        nibbles[i / 2] |= static_cast<std::uint8_t>(i % 2 ? nibble << 4 : nibble);
      }
      at += len;
    }
    out.put_all<float>(scales);
    out.put_all<std::uint8_t>(nibbles);
    return std::move(out).take();
  }

  std::optional<Refusal> add_decoded(std::span<const std::uint8_t> payload,
                                     std::span<float> into) const override {
    PayloadReader in(payload);
    if (auto bad = check_start(in, CompressorId::int4, size_)) return bad;
    ScaledBlocks read;
    if (auto bad =
            read_scaled_blocks(in, payload.size(), blocks_.size(), (size_ + 1) / 2, spec(), "nibbles", read))
      return bad;
    const auto blocks = static_cast<std::uint32_t>(blocks_.size());
    const std::span<const std::uint8_t> scales = read.scales, nibbles = read.codes;
    for (std::uint64_t i = 0; i < size_; ++i)
      if (nibble(nibbles, i) == 0x8)
        return refuse(wire::DropReason::bad_dtype, spec(),
                      "value " + std::to_string(i) + " is -8, outside [-7, 7]");
    if (size_ % 2 == 1 && (nibbles[size_ / 2] >> 4) != 0)
      return refuse(wire::DropReason::bad_dtype, spec(), "the padding nibble is not 0");
    if (into.size() != size_) throw std::invalid_argument(spec() + ": decode into the wrong length");
    std::uint64_t i = 0;
    for (std::uint32_t b = 0; b < blocks; ++b) {
      const float s = value_at<float>(scales, b);
      for (const auto end = i + blocks_[b]; i < end; ++i) {
        const int q = static_cast<int>(nibble(nibbles, i) ^ 0x8) - 8;  // sign-extends 4 bits
        into[i] += static_cast<float>(q) * s;
      }
    }
    return std::nullopt;
  }

 private:
  static std::uint8_t nibble(std::span<const std::uint8_t> bytes, std::uint64_t i) {
    return static_cast<std::uint8_t>(i % 2 ? bytes[i / 2] >> 4 : bytes[i / 2] & 0xF);
  }
  const std::vector<std::uint32_t> blocks_;
};

}  // namespace

std::unique_ptr<Compressor> make_int4(std::uint64_t n, std::span<const std::uint64_t> tensor_sizes) {
  return std::make_unique<Int4>(n, tensor_sizes);
}

}  // namespace hearsay::compress
