// One accepted incoming message: its decoded, validated header and its payload bytes,
// owned by whatever the transport received them into (for ZeroMQ the zmq::message_t
// itself, so receiving never copies the payload).
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/fiber.hpp"
#include "gossip/network/wire/header.hpp"

namespace hearsay::transport {

// A header's `due` (link emulation held at the receiver, PROTOCOL.md 4.7) as a time of
// this machine's monotonic clock, and back; a `due` is never 0, which means none.
inline std::chrono::steady_clock::time_point due_time(std::uint64_t due_ns) {
  return std::chrono::steady_clock::time_point(
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::nanoseconds(due_ns)));
}
inline std::uint64_t due_ns_of(std::chrono::steady_clock::time_point t) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  return static_cast<std::uint64_t>(ns > 1 ? ns : 1);
}

class Message {
 public:
  // `payload` must stay valid for as long as `owner` lives. Only transports build
  // Messages, after admission checked the header against the payload and its values;
  // the time of construction is the message's arrival (fiber::Clock: in virtual time on a
  // scheduler's thread, as every deadline it is compared with).
  Message(wire::Header header, std::span<const std::uint8_t> payload, std::shared_ptr<const void> owner)
      : header_(std::move(header)),
        payload_(payload),
        owner_(std::move(owner)),
        received_at_(fiber::Clock::now()) {}

  const wire::Header& header() const noexcept { return header_; }
  const std::string& sender() const noexcept { return header_.sender; }
  wire::MessageType type() const noexcept { return header_.type; }
  // Element count of the payload (0 without one).
  std::uint64_t count() const noexcept { return header_.count; }
  // The raw payload frame (empty without one).
  std::span<const std::uint8_t> payload() const noexcept { return payload_; }
  // When the transport accepted it: algorithms learn from it how late a message came,
  // even one they only look at rounds later.
  std::chrono::steady_clock::time_point received_at() const noexcept { return received_at_; }
  // For link emulation, which holds a message that came early until its emulated link
  // would have delivered it: that moment is its arrival.
  void set_received_at(std::chrono::steady_clock::time_point at) noexcept { received_at_ = at; }

  // Decodes the payload straight into dst (no intermediate buffer); dst.size() must be
  // count(), else std::invalid_argument. The values were checked finite on arrival.
  void decode_into(std::span<float> dst) const;
  // Decodes into a new vector of count() floats (count() matches the received bytes).
  std::vector<float> decode() const;
  // The values themselves, without a copy, when the payload is f32 and float-aligned in
  // memory (as ZeroMQ's large messages are); empty otherwise: then decode.
  std::span<const float> f32_view() const noexcept;
  // f32_view() when it is available, else the values decoded into scratch (resized to
  // count()): the cheapest way to read them.
  std::span<const float> values(std::vector<float>& scratch) const;

 private:
  wire::Header header_;
  std::span<const std::uint8_t> payload_;
  std::shared_ptr<const void> owner_;
  std::chrono::steady_clock::time_point received_at_;
};

}  // namespace hearsay::transport
