// The wire format's frame 2: raw element values, never MessagePack-encoded floats.
// Layouts (all multi-byte values little-endian; see docs/PROTOCOL.md):
//   f32   count x IEEE binary32
//   f16   count x IEEE binary16 (round to nearest even)
//   bf16  count x bfloat16 (the top 16 bits of binary32, round to nearest even)
//   int8  count x int8, then B x binary32 scales, then B x uint8 (block length - 1), then
//         uint32 B. The blocks tile the values in order; an element of block b decodes
//         to q * scale[b]. The sender chooses the blocks (int8_blocks: cut at the model's
//         tensors, at most kInt8Chunk values each), so a tensor of small values keeps its
//         own scale: with fixed 256-value chunks, BatchNorm's step counter (a float in the
//         hundreds) set the scale of its layer's running statistics, and D-PSGD peers
//         mixing them drifted apart (docs/PERFORMANCE.md). The receiver needs no plan.
//         The scales follow the values directly, so they are not 4-byte aligned in general.
// Payload pointers may be unaligned (ZeroMQ frames make no promise); nothing here
// assumes more than byte alignment of the payload.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "gossip/network/wire/header.hpp"

namespace hearsay::wire {

// Checks the payload's values before anything touches parameters: f32 all finite,
// f16/bf16 exponent not all ones, int8 scales finite and >= 0 and its block
// lengths summing to count. nullopt when fine.
// size_mismatch when payload.size() != payload_bytes(d, count); bad_dtype for none
// with a non-zero count or an unknown dtype.
std::optional<DropReason> check_values(Dtype d, std::uint64_t count, std::span<const std::uint8_t> payload);
// The checksum (header.checksum, XXH3-64 of the frame) and check_values in one pass:
// large payloads are walked in cache-sized blocks, each hashed and checked while it is in
// cache, instead of reading the whole frame from memory twice. A wrong checksum is
// reported before non-finite values.
std::optional<DropReason> check_payload(const Header& h, std::span<const std::uint8_t> payload);

// int8's blocks for n values cut at tensor_sizes (summing to n; empty: one tensor), then
// into pieces of at most kInt8Chunk. split_blocks does the same for any cap (the
// compressors' blocks). std::invalid_argument when the sizes do not sum to n.
std::vector<std::uint32_t> split_blocks(std::uint64_t n, std::span<const std::uint64_t> tensor_sizes,
                                        std::uint64_t cap);
std::vector<std::uint32_t> int8_blocks(std::uint64_t n, std::span<const std::uint64_t> tensor_sizes = {});
// The sizes of the tensor pieces that values [offset, offset + length) of a vector cut at
// tensor_sizes hold (a region of all-reduce's ring): empty when tensor_sizes is.
std::vector<std::uint64_t> tensor_sizes_within(std::span<const std::uint64_t> tensor_sizes,
                                               std::uint64_t offset, std::uint64_t length);

// The payload size of src as dtype d: payload_bytes, or for int8 with `blocks` given,
// int8_payload_bytes.
std::uint64_t encoded_bytes(Dtype d, std::size_t count, std::span<const std::uint32_t> blocks = {});
// Encodes src as dtype d into dst (dst.size() == encoded_bytes(d, src.size(), blocks)).
// int8_blocks: int8's blocks (each 1..kInt8Chunk, summing to src.size()); empty: blocks of
// kInt8Chunk. Throws std::invalid_argument on a size mismatch, bad blocks or Dtype::none
// with elements.
void encode_values(Dtype d, std::span<const float> src, std::span<std::uint8_t> dst,
                   std::span<const std::uint32_t> int8_blocks = {});

// Decodes a checked payload into dst (dst.size() == count) with no intermediate copy.
// Throws std::invalid_argument when payload.size() != payload_bytes(d, dst.size()).
void decode_values(Dtype d, std::span<const std::uint8_t> payload, std::span<float> dst);

}  // namespace hearsay::wire
