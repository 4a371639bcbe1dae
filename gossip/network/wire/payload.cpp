#include "gossip/network/wire/payload.hpp"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>
#if defined(__x86_64__)
#define XXH_DISPATCH_DISABLE_REPLACE
#include <xxh_x86dispatch.h>
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cpu/convert.hpp"
#include "kernels/cpu/vector.hpp"

namespace hearsay::wire {

// Payload values are little-endian on the wire and copied or converted without byte
// swaps; a big-endian port would need them here.
static_assert(std::endian::native == std::endian::little, "the payload code assumes a little-endian host");

namespace {

bool known_dtype(Dtype d) {
  return static_cast<std::uint8_t>(d) <= static_cast<std::uint8_t>(Dtype::compressed);
}

// int8 scales: finite and >= 0 (a negative scale is no symmetric quantisation).
bool scales_valid(const std::uint8_t* bytes, std::size_t chunks) {
  for (std::size_t i = 0; i < chunks; ++i) {
    float scale;
    std::memcpy(&scale, bytes + i * sizeof(float), sizeof(float));
    if (!std::isfinite(scale) || scale < 0.0f) return false;
  }
  return true;
}

// An int8 payload's parts: count values, then `blocks` scales, lengths and the count.
struct Int8Layout {
  std::size_t blocks = 0;
  const std::uint8_t* scales = nullptr;
  const std::uint8_t* lengths = nullptr;  // length - 1 per block
};

// The layout of an int8 payload whose size fits (payload_size_fits), or nullopt when its
// trailer does not say that size or its lengths do not tile count.
std::optional<Int8Layout> int8_layout(std::uint64_t count, std::span<const std::uint8_t> payload) {
  const std::uint8_t* p = payload.data();
  const std::size_t size = payload.size();
  std::uint32_t blocks = 0;
  std::memcpy(&blocks, p + size - 4, 4);
  if (int8_payload_bytes(count, blocks) != size) return std::nullopt;
  Int8Layout l{blocks, p + count, p + count + 4 * std::size_t{blocks}};
  std::uint64_t sum = 0;
  for (std::size_t b = 0; b < l.blocks; ++b) sum += std::uint64_t{l.lengths[b]} + 1;
  if (sum != count) return std::nullopt;
  return l;
}

// Whether the blocks are all kInt8Chunk long but the last: the kernels' fixed chunks.
bool default_blocks(std::size_t n, const Int8Layout& l) {
  if (l.blocks != (n + kInt8Chunk - 1) / kInt8Chunk) return false;
  for (std::size_t b = 0; b + 1 < l.blocks; ++b)
    if (l.lengths[b] != kInt8Chunk - 1) return false;
  return true;
}

void encode_int8(std::span<const float> src, std::uint8_t* p, std::span<const std::uint32_t> blocks) {
  const std::size_t n = src.size();
  std::vector<std::uint32_t> plain;
  if (blocks.empty()) blocks = plain = int8_blocks(n);
  std::uint64_t at = 0;
  for (const auto len : blocks) {
    if (len == 0 || len > kInt8Chunk)
      throw std::invalid_argument("encode_values: an int8 block of " + std::to_string(len) +
                                  " values (1 to " + std::to_string(kInt8Chunk) + ")");
    at += len;
  }
  if (at != n)
    throw std::invalid_argument("encode_values: int8 blocks of " + std::to_string(at) + " values for " +
                                std::to_string(n));
  auto* q = reinterpret_cast<std::int8_t*>(p);
  auto* scales = reinterpret_cast<float*>(p + n);
  if (!plain.empty() || n == 0) {  // kInt8Chunk each: the kernels' fixed chunks in one call
    cpu::f32_to_int8(n, kInt8Chunk, src.data(), q, scales);
  } else {
    at = 0;
    for (std::size_t b = 0; b < blocks.size(); ++b) {
      cpu::f32_to_int8(blocks[b], blocks[b], src.data() + at, q + at, scales + b);
      at += blocks[b];
    }
  }
  for (std::size_t b = 0; b < blocks.size(); ++b)
    p[n + 4 * blocks.size() + b] = static_cast<std::uint8_t>(blocks[b] - 1);
  const auto count = static_cast<std::uint32_t>(blocks.size());
  std::memcpy(p + n + 5 * blocks.size(), &count, 4);
}

void decode_int8(std::span<const std::uint8_t> payload, std::span<float> dst) {
  const std::size_t n = dst.size();
  const auto layout = int8_layout(n, payload);
  if (!layout)
    throw std::invalid_argument("decode_values: the int8 payload's blocks do not tile its " +
                                std::to_string(n) + " values");
  const auto* q = reinterpret_cast<const std::int8_t*>(payload.data());
  const auto* scales = reinterpret_cast<const float*>(layout->scales);
  if (default_blocks(n, *layout)) {
    cpu::int8_to_f32(n, kInt8Chunk, q, scales, dst.data());
    return;
  }
  std::size_t at = 0;
  for (std::size_t b = 0; b < layout->blocks; ++b) {
    const std::size_t len = std::size_t{layout->lengths[b]} + 1;
    cpu::int8_to_f32(len, len, q + at, scales + b, dst.data() + at);
    at += len;
  }
}

std::uint64_t required_bytes(Dtype d, std::size_t count, const char* what) {
  const auto bytes = payload_bytes(d, count);
  if (!bytes || !known_dtype(d))
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(count) +
                                " elements cannot be sent as " + std::string(to_string(d)));
  return *bytes;
}

}  // namespace

std::optional<DropReason> check_values(Dtype d, std::uint64_t count, std::span<const std::uint8_t> payload) {
  if (!known_dtype(d) || (d == Dtype::none && count != 0)) return DropReason::bad_dtype;
  if (!payload_size_fits(d, count, payload.size())) return DropReason::size_mismatch;
  if (d == Dtype::compressed) return std::nullopt;  // its compressor checks the rest
  const std::size_t n = static_cast<std::size_t>(count);
  const std::uint8_t* p = payload.data();
  bool finite = true;
  switch (d) {
    case Dtype::none:
      break;
    case Dtype::f32:
      finite = cpu::all_finite(n, reinterpret_cast<const float*>(p));
      break;
    case Dtype::f16:
      finite = cpu::f16_all_finite(n, reinterpret_cast<const std::uint16_t*>(p));
      break;
    case Dtype::bf16:
      finite = cpu::bf16_all_finite(n, reinterpret_cast<const std::uint16_t*>(p));
      break;
    case Dtype::int8: {
      const auto layout = int8_layout(n, payload);
      if (!layout) return DropReason::size_mismatch;
      finite = scales_valid(layout->scales, layout->blocks);
      break;
    }
    case Dtype::compressed:
      break;
  }
  if (!finite) return DropReason::non_finite;
  return std::nullopt;
}

std::optional<DropReason> check_payload(const Header& h, std::span<const std::uint8_t> payload) {
  // 128 KiB: well inside L2, a multiple of every element size.
  constexpr std::size_t kBlock = 128 * 1024;
  if (payload.size() <= kBlock || h.dtype == Dtype::int8 || h.dtype == Dtype::none ||
      h.dtype == Dtype::compressed) {
    if (checksum(payload) != h.checksum) return DropReason::bad_checksum;
    return check_values(h.dtype, h.count, payload);
  }
  if (!known_dtype(h.dtype)) return DropReason::bad_dtype;
  const auto bytes = payload_bytes(h.dtype, h.count);
  if (!bytes || *bytes != payload.size()) return DropReason::size_mismatch;
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  bool finite = true;
  for (std::size_t offset = 0; offset < payload.size(); offset += kBlock) {
    const std::size_t len = std::min(kBlock, payload.size() - offset);
    const std::uint8_t* p = payload.data() + offset;
#if defined(__x86_64__)
    XXH3_64bits_update_dispatch(&state, p, len);
#else
    XXH3_64bits_update(&state, p, len);
#endif
    if (!finite) continue;  // keep hashing: a wrong checksum is the better reason
    if (h.dtype == Dtype::f32) {
      finite = cpu::all_finite(len / sizeof(float), reinterpret_cast<const float*>(p));
    } else if (h.dtype == Dtype::f16) {
      finite = cpu::f16_all_finite(len / 2, reinterpret_cast<const std::uint16_t*>(p));
    } else {
      finite = cpu::bf16_all_finite(len / 2, reinterpret_cast<const std::uint16_t*>(p));
    }
  }
  if (XXH3_64bits_digest(&state) != h.checksum) return DropReason::bad_checksum;
  if (!finite) return DropReason::non_finite;
  return std::nullopt;
}

std::vector<std::uint32_t> split_blocks(std::uint64_t n, std::span<const std::uint64_t> tensor_sizes,
                                        std::uint64_t cap) {
  std::uint64_t sum = 0;
  for (const auto t : tensor_sizes) sum += t;
  if (!tensor_sizes.empty() && sum != n)
    throw std::invalid_argument("blocks: the tensor sizes sum to " + std::to_string(sum) + ", not " +
                                std::to_string(n));
  if (cap == 0) throw std::invalid_argument("blocks: a cap of 0 values");
  const std::vector<std::uint64_t> whole{n};
  std::vector<std::uint32_t> out;
  for (const auto t : tensor_sizes.empty() ? std::span<const std::uint64_t>(whole) : tensor_sizes)
    for (std::uint64_t at = 0; at < t; at += cap)
      out.push_back(static_cast<std::uint32_t>(std::min(cap, t - at)));
  return out;
}

std::vector<std::uint32_t> int8_blocks(std::uint64_t n, std::span<const std::uint64_t> tensor_sizes) {
  return split_blocks(n, tensor_sizes, kInt8Chunk);
}

std::vector<std::uint64_t> tensor_sizes_within(std::span<const std::uint64_t> tensor_sizes,
                                               std::uint64_t offset, std::uint64_t length) {
  std::vector<std::uint64_t> out;
  std::uint64_t start = 0;
  for (const auto t : tensor_sizes) {
    const std::uint64_t from = std::max(start, offset), to = std::min(start + t, offset + length);
    if (from < to) out.push_back(to - from);
    start += t;
  }
  if (!tensor_sizes.empty() && start < offset + length)
    throw std::invalid_argument("tensor_sizes_within: values " + std::to_string(offset) + " to " +
                                std::to_string(offset + length) + " lie past the tensors' " +
                                std::to_string(start));
  return out;
}

std::uint64_t encoded_bytes(Dtype d, std::size_t count, std::span<const std::uint32_t> blocks) {
  if (d == Dtype::int8 && !blocks.empty()) return int8_payload_bytes(count, blocks.size());
  return required_bytes(d, count, "encode_values");
}

void encode_values(Dtype d, std::span<const float> src, std::span<std::uint8_t> dst,
                   std::span<const std::uint32_t> int8_blocks) {
  const std::uint64_t bytes =
      encoded_bytes(d, src.size(), d == Dtype::int8 ? int8_blocks : std::span<const std::uint32_t>{});
  if (bytes != dst.size())
    throw std::invalid_argument("encode_values: " + std::to_string(src.size()) + " elements as " +
                                std::string(to_string(d)) + " need " + std::to_string(bytes) +
                                " bytes, the destination has " + std::to_string(dst.size()));
  const std::size_t n = src.size();
  std::uint8_t* p = dst.data();
  switch (d) {
    case Dtype::none:
      break;
    case Dtype::f32:
      if (n != 0) std::memcpy(p, src.data(), n * sizeof(float));
      break;
    case Dtype::f16:
      cpu::f32_to_f16(n, src.data(), reinterpret_cast<std::uint16_t*>(p));
      break;
    case Dtype::bf16:
      cpu::f32_to_bf16(n, src.data(), reinterpret_cast<std::uint16_t*>(p));
      break;
    case Dtype::int8:
      encode_int8(src, p, int8_blocks);
      break;
    case Dtype::compressed:
      break;  // required_bytes refused it: a compressor encodes differences
  }
}

void decode_values(Dtype d, std::span<const std::uint8_t> payload, std::span<float> dst) {
  const std::uint64_t bytes = required_bytes(d, dst.size(), "decode_values");
  if (d == Dtype::int8 ? !payload_size_fits(d, dst.size(), payload.size()) : bytes != payload.size())
    throw std::invalid_argument("decode_values: " + std::to_string(dst.size()) + " elements as " +
                                std::string(to_string(d)) + " need " + std::to_string(bytes) +
                                " payload bytes, got " + std::to_string(payload.size()));
  const std::size_t n = dst.size();
  const std::uint8_t* p = payload.data();
  switch (d) {
    case Dtype::none:
      break;
    case Dtype::f32:
      if (n != 0) std::memcpy(dst.data(), p, n * sizeof(float));
      break;
    case Dtype::f16:
      cpu::f16_to_f32(n, reinterpret_cast<const std::uint16_t*>(p), dst.data());
      break;
    case Dtype::bf16:
      cpu::bf16_to_f32(n, reinterpret_cast<const std::uint16_t*>(p), dst.data());
      break;
    case Dtype::int8:
      decode_int8(payload, dst);
      break;
    case Dtype::compressed:
      break;  // required_bytes refused it: its compressor decodes it
  }
}

}  // namespace hearsay::wire
