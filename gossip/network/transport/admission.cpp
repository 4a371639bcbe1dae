#include "gossip/network/transport/admission.hpp"

#include "gossip/network/wire/payload.hpp"

namespace hearsay::transport {

namespace {
// A sender's own words in our log: bytes outside printable ASCII become '?'.
std::string shown(std::string_view text) {
  std::string out(text);
  for (char& c : out)
    if (c < 0x20 || c > 0x7e) c = '?';
  return out;
}
}  // namespace

Admission admit(std::size_t frame_count, std::span<const std::uint8_t> header_frame,
                std::span<const std::uint8_t> payload, std::string_view identity, Route route,
                const wire::Expectation& expect, std::uint64_t max_payload_bytes) {
  using wire::DropReason;
  auto refuse = [](DropReason r) { return Admission{std::nullopt, r, {}}; };
  if (frame_count != 1 && frame_count != 2) return refuse(DropReason::bad_frame_count);
  if (header_frame.size() > wire::kMaxHeaderBytes) return refuse(DropReason::header_too_large);
  wire::DecodeResult decoded = wire::decode_header(header_frame);
  if (!decoded.header) return refuse(decoded.reason);
  const wire::Header& h = *decoded.header;
  switch (route) {
    case Route::direct:
      if (h.sender != identity) return refuse(DropReason::spoofed_sender);
      break;
    case Route::joiner:
      if (h.type != wire::MessageType::hello) return refuse(DropReason::spoofed_sender);
      break;
    case Route::seed:
      if (h.type != wire::MessageType::refused) return refuse(DropReason::spoofed_sender);
      break;
  }
  const bool has_payload = frame_count == 2;
  if (payload.size() > max_payload_bytes) return refuse(DropReason::size_mismatch);
  if (auto reason = wire::validate(h, expect, payload, has_payload, /*verify_checksum=*/!has_payload)) {
    Admission refused = refuse(*reason);
    if (*reason == DropReason::wrong_fingerprint)
      refused.detail = "it trains model '" + shown(h.fingerprint) + "', this peer '" + expect.fingerprint +
                       "': every peer of a run must use the same --model (and hearsay version)";
    else if (*reason == DropReason::wrong_run)
      refused.detail = "it belongs to run '" + shown(h.run_id) + "', this peer to '" + expect.run_id +
                       "': give every peer of a run the same --run";
    if (h.type == wire::MessageType::hello &&
        (*reason == DropReason::wrong_run || *reason == DropReason::wrong_fingerprint))
      refused.refused_hello = h;
    return refused;
  }
  if (has_payload) {
    if (auto reason = wire::check_payload(h, payload)) return refuse(*reason);
  }
  return Admission{std::move(decoded.header), {}, {}};
}

}  // namespace hearsay::transport
