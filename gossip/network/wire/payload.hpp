// The wire format's frame 2: raw element values, never MessagePack-encoded floats.
// Layouts (all multi-byte values little-endian; see docs/PROTOCOL.md):
//   f32   count x IEEE binary32
//   f16   count x IEEE binary16 (round to nearest even)
//   bf16  count x bfloat16 (the top 16 bits of binary32, round to nearest even)
//   int8  count x int8, then ceil(count / kInt8Chunk) x binary32 scales; element i
//         decodes to q[i] * scale[i / kInt8Chunk]. The scales follow the values
//         directly, so they are not 4-byte aligned in general.
// Payload pointers may be unaligned (ZeroMQ frames make no promise); nothing here
// assumes more than byte alignment of the payload.
#pragma once
#include <cstdint>
#include <optional>
#include <span>

#include "gossip/network/wire/header.hpp"

namespace hearsay::wire {

// Checks the payload's values before anything touches parameters: f32 all finite,
// f16/bf16 exponent not all ones, int8 scales finite and >= 0. nullopt when fine.
// size_mismatch when payload.size() != payload_bytes(d, count); bad_dtype for none
// with a non-zero count or an unknown dtype.
std::optional<DropReason> check_values(Dtype d, std::uint64_t count, std::span<const std::uint8_t> payload);
// The checksum (header.checksum, XXH3-64 of the frame) and check_values in one pass:
// large payloads are walked in cache-sized blocks, each hashed and checked while it is in
// cache, instead of reading the whole frame from memory twice. A wrong checksum is
// reported before non-finite values.
std::optional<DropReason> check_payload(const Header& h, std::span<const std::uint8_t> payload);

// Encodes src as dtype d into dst (dst.size() == *payload_bytes(d, src.size())).
// Throws std::invalid_argument on a size mismatch or Dtype::none with elements.
void encode_values(Dtype d, std::span<const float> src, std::span<std::uint8_t> dst);

// Decodes a checked payload into dst (dst.size() == count) with no intermediate copy.
// Throws std::invalid_argument when payload.size() != payload_bytes(d, dst.size()).
void decode_values(Dtype d, std::span<const std::uint8_t> payload, std::span<float> dst);

}  // namespace hearsay::wire
