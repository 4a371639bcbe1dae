// The bytes every compressed payload starts with, and little-endian reading and writing
// for the compressors' formats (docs/PROTOCOL.md, "Compressed differences"):
//
//   u8 id   u8 0   u16 0   u32 n      (8 bytes: which compressor, the dense length)
//
// The reader never reads past the payload: each take() says whether the bytes were there.
#pragma once
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gossip/mixing/compress/compressor.hpp"

namespace hearsay::compress {

enum class CompressorId : std::uint8_t { topk = 1, randk = 2, sign = 3, int4 = 4, powergossip = 5 };
inline constexpr std::size_t kCommonBytes = 8;

class PayloadWriter {
 public:
  explicit PayloadWriter(std::size_t bytes) { out_.reserve(bytes); }
  void start(CompressorId id, std::uint64_t n) {
    put<std::uint8_t>(static_cast<std::uint8_t>(id));
    put<std::uint8_t>(0);
    put<std::uint16_t>(0);
    put<std::uint32_t>(static_cast<std::uint32_t>(n));
  }
  template <class T>
  void put(T value) {
    const auto at = out_.size();
    out_.resize(at + sizeof(T));
    std::memcpy(out_.data() + at, &value, sizeof(T));  // little-endian hosts only (wire/payload.cpp)
  }
  template <class T>
  void put_all(std::span<const T> values) {
    const auto at = out_.size();
    out_.resize(at + values.size_bytes());
    if (!values.empty()) std::memcpy(out_.data() + at, values.data(), values.size_bytes());
  }
  std::vector<std::uint8_t> take() && { return std::move(out_); }

 private:
  std::vector<std::uint8_t> out_;
};

class PayloadReader {
 public:
  explicit PayloadReader(std::span<const std::uint8_t> bytes) : bytes_(bytes) {}
  template <class T>
  bool take(T& value) {
    if (bytes_.size() - at_ < sizeof(T)) return false;
    std::memcpy(&value, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return true;
  }
  // The next count values of T, unaligned: read them with value(i).
  bool skip(std::size_t count, std::size_t size, std::span<const std::uint8_t>& out) {
    if (count > (bytes_.size() - at_) / size) return false;
    out = bytes_.subspan(at_, count * size);
    at_ += count * size;
    return true;
  }
  std::size_t left() const noexcept { return bytes_.size() - at_; }

 private:
  std::span<const std::uint8_t> bytes_;
  std::size_t at_ = 0;
};

template <class T>
T value_at(std::span<const std::uint8_t> bytes, std::size_t i) {
  T v;
  std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
  return v;
}

// Checks the common start against this compressor: nullopt when it is `id` for n values.
std::optional<Refusal> check_start(PayloadReader& in, CompressorId id, std::uint64_t n);
// What sign and int4 share after the start: u32 blocks (== blocks), that many f32 scales
// (finite, >= 0), then exactly tail_bytes of codes, and nothing after; `codes` names them
// for the message ("signs", "nibbles").
struct ScaledBlocks {
  std::span<const std::uint8_t> scales, codes;
};
std::optional<Refusal> read_scaled_blocks(PayloadReader& in, std::size_t payload_size, std::size_t blocks,
                                          std::uint64_t tail_bytes, const std::string& spec,
                                          const char* codes, ScaledBlocks& out);
// A refusal of the given reason, detail prefixed with the compressor's spec.
Refusal refuse(wire::DropReason reason, const std::string& spec, const std::string& detail);

}  // namespace hearsay::compress
