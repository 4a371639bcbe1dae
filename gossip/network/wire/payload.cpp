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
    case Dtype::int8:
      finite = scales_valid(p + n, (n + kInt8Chunk - 1) / kInt8Chunk);
      break;
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

void encode_values(Dtype d, std::span<const float> src, std::span<std::uint8_t> dst) {
  const std::uint64_t bytes = required_bytes(d, src.size(), "encode_values");
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
      cpu::f32_to_int8(n, kInt8Chunk, src.data(), reinterpret_cast<std::int8_t*>(p),
                       reinterpret_cast<float*>(p + n));
      break;
    case Dtype::compressed:
      break;  // required_bytes refused it: a compressor encodes differences
  }
}

void decode_values(Dtype d, std::span<const std::uint8_t> payload, std::span<float> dst) {
  const std::uint64_t bytes = required_bytes(d, dst.size(), "decode_values");
  if (bytes != payload.size())
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
      cpu::int8_to_f32(n, kInt8Chunk, reinterpret_cast<const std::int8_t*>(p),
                       reinterpret_cast<const float*>(p + n), dst.data());
      break;
    case Dtype::compressed:
      break;  // required_bytes refused it: its compressor decodes it
  }
}

}  // namespace hearsay::wire
