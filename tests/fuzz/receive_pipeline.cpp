#include "receive_pipeline.hpp"

#include <cstring>
#include <optional>

#include "gossip/mixing/compress/compressor.hpp"
#include "gossip/network/wire/header.hpp"
#include "gossip/network/wire/payload.hpp"

namespace hearsay::wire::fuzz {
namespace {

void require(bool property) {
  if (!property) __builtin_trap();
}

std::vector<std::span<const std::uint8_t>> split_frames(std::span<const std::uint8_t> input,
                                                        std::size_t frames) {
  std::vector<std::span<const std::uint8_t>> out;
  for (std::size_t i = 0; i < frames; ++i) {
    if (i + 1 == frames) {
      out.push_back(input);
      break;
    }
    std::uint32_t length = 0;
    const std::size_t prefix = std::min<std::size_t>(4, input.size());
    std::memcpy(&length, input.data(), prefix);  // little-endian host (as the payload code)
    input = input.subspan(prefix);
    const std::size_t take = std::min<std::size_t>(length, input.size());
    out.push_back(input.first(take));
    input = input.subspan(take);
  }
  return out;
}

}  // namespace

Reached run_receive_pipeline(std::span<const std::uint8_t> input) {
  if (input.empty()) return Reached::frames;
  const std::uint8_t control = input[0];
  const auto frames = split_frames(input.subspan(1), control & 0x3);
  // A ZeroMQ receiver first sees the frame count: 1 (header) or 2 (header + payload).
  if (frames.size() != 1 && frames.size() != 2) return Reached::frames;  // DropReason::bad_frame_count

  const DecodeResult decoded = decode_header(frames[0]);
  if (!decoded.header) return Reached::header;
  const Header& h = *decoded.header;

  // Whatever decodes must survive a re-encode unchanged.
  const DecodeResult again = decode_header(encode_header(h));
  require(again.header.has_value() && *again.header == h);

  const Expectation expect =
      (control & 0x4) ? Expectation{h.run_id, h.fingerprint} : Expectation{kFuzzRun, kFuzzModel};
  const bool has_payload = frames.size() == 2;
  const std::span<const std::uint8_t> payload = has_payload ? frames[1] : std::span<const std::uint8_t>{};
  if (validate(h, expect, payload, has_payload)) return Reached::validate;
  if (check_values(h.dtype, h.count, payload)) return Reached::values;
  if (h.dtype == Dtype::compressed) {
    // A receiver decodes a compressed payload only when its count is its model's (the
    // exchange checks that first): here every compressor for a model of that count, kept
    // small so that the buffer stays bounded by the input. A refusal is fine; a crash not.
    if (h.count > 64 * 1024) return Reached::accepted;
    std::vector<float> into(static_cast<std::size_t>(h.count), 0.0f);
    for (const char* spec : {"topk:1%", "randk:1%", "sign", "int4"}) {
      const auto c = compress::make_compressor(spec, h.count);
      if (!c->add_decoded(payload, into)) require(c->add_decoded(c->encode(into, 1), into) == std::nullopt);
    }
    return Reached::accepted;
  }

  // validate() tied count to payload.size(), so this buffer is at most 4 floats per
  // payload byte: bounded by the input, never by what the header claims.
  require(payload_bytes(h.dtype, h.count) == payload.size());
  std::vector<float> values(static_cast<std::size_t>(h.count));
  decode_values(h.dtype, payload, values);
  if (h.dtype == Dtype::f32 || h.dtype == Dtype::f16 || h.dtype == Dtype::bf16) {
    // Finite values in these dtypes convert to f32 exactly, so they encode back to the
    // same bytes.
    std::vector<std::uint8_t> reencoded(payload.size());
    encode_values(h.dtype, values, reencoded);
    require(std::equal(reencoded.begin(), reencoded.end(), payload.begin(), payload.end()));
  }
  return Reached::accepted;
}

std::vector<std::uint8_t> join_frames(const std::vector<std::vector<std::uint8_t>>& frames,
                                      bool own_expectation) {
  std::vector<std::uint8_t> out;
  out.push_back(static_cast<std::uint8_t>((frames.size() & 0x3) | (own_expectation ? 0x4 : 0)));
  for (std::size_t i = 0; i < frames.size(); ++i) {
    if (i + 1 < frames.size()) {
      const auto length = static_cast<std::uint32_t>(frames[i].size());
      for (int b = 0; b < 4; ++b) out.push_back(static_cast<std::uint8_t>(length >> (8 * b)));
    }
    out.insert(out.end(), frames[i].begin(), frames[i].end());
  }
  return out;
}

}  // namespace hearsay::wire::fuzz
