#include "gossip/transport/admission.hpp"

#include "gossip/wire/payload.hpp"

namespace hearsay::transport {

Admission admit(std::size_t frame_count, std::span<const std::uint8_t> header_frame,
                std::span<const std::uint8_t> payload, std::string_view identity,
                const wire::Expectation& expect, std::uint64_t max_payload_bytes) {
  using wire::DropReason;
  auto refuse = [](DropReason r) { return Admission{std::nullopt, r}; };
  if (frame_count != 1 && frame_count != 2) return refuse(DropReason::bad_frame_count);
  if (header_frame.size() > wire::kMaxHeaderBytes) return refuse(DropReason::header_too_large);
  wire::DecodeResult decoded = wire::decode_header(header_frame);
  if (!decoded.header) return refuse(decoded.reason);
  const wire::Header& h = *decoded.header;
  if (h.sender != identity) return refuse(DropReason::spoofed_sender);
  const bool has_payload = frame_count == 2;
  if (payload.size() > max_payload_bytes) return refuse(DropReason::size_mismatch);
  if (auto reason = wire::validate(h, expect, payload, has_payload, /*verify_checksum=*/!has_payload))
    return refuse(*reason);
  if (has_payload) {
    if (auto reason = wire::check_payload(h, payload)) return refuse(*reason);
  }
  return Admission{std::move(decoded.header), {}};
}

}  // namespace hearsay::transport
