// The one path every incoming message takes before anything may use it, shared by the
// ZeroMQ and in-process transports so tests of either exercise the real checks.
//
// Order: frame count, header size (before decoding), MessagePack decode, sender vs the
// transport-level identity, payload size bound, wire::validate (run, model, dtype,
// sizes, checksum), then the values themselves (wire::check_values: finite, scales).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "gossip/network/wire/header.hpp"

namespace hearsay::transport {

struct Admission {
  std::optional<wire::Header> header;  // set when the message was accepted
  wire::DropReason reason{};           // why not, otherwise
  // For a message of another run or model: what the sender runs and what we run, and
  // what to do about it (for the drop log; the one refusal a user must act on).
  std::string detail;
};

// frame_count: frames after the transport's routing identity (1 = header only,
// 2 = header + payload). payload is empty when frame_count != 2. identity: who the
// transport says sent it (ZeroMQ routing id, in-process endpoint id).
Admission admit(std::size_t frame_count, std::span<const std::uint8_t> header_frame,
                std::span<const std::uint8_t> payload, std::string_view identity,
                const wire::Expectation& expect, std::uint64_t max_payload_bytes);

}  // namespace hearsay::transport
