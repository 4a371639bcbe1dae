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
  // A hello refused for its run or model: the transport answers it with `refused`, so
  // that the joiner stops at once with the reason instead of retrying for --join-timeout.
  std::optional<wire::Header> refused_hello;
};

// The connection a message came over, which decides how its sender is checked.
enum class Route {
  // The identity is the sender's id (a peer's own connection, an in-process endpoint):
  // the header's sender must equal it.
  direct,
  // A joiner's hello connection (its identity starts with kJoinerIdentityPrefix): only a
  // hello, which names its sender itself. Each joiner process connects under an identity
  // of its own, so that a hello reaches the seed even when its id is taken there, and the
  // seed can say so (ZeroMQ would drop a second connection under a taken identity).
  joiner,
  // Our own hello connection to a seed: only the seed's `refused`, whoever it says it is
  // (the connection goes to the one address we named).
  seed,
};
inline constexpr char kJoinerIdentityPrefix = '\x1f';

// frame_count: frames after the transport's routing identity (1 = header only,
// 2 = header + payload). payload is empty when frame_count != 2. identity: who the
// transport says sent it (ZeroMQ routing id, in-process endpoint id).
Admission admit(std::size_t frame_count, std::span<const std::uint8_t> header_frame,
                std::span<const std::uint8_t> payload, std::string_view identity, Route route,
                const wire::Expectation& expect, std::uint64_t max_payload_bytes);

}  // namespace hearsay::transport
