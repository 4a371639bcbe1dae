#include "gossip/network/transport/transport.hpp"

#include <cstdint>
#include <cstring>
#include <random>

#include "gossip/network/wire/payload.hpp"

namespace hearsay::transport {

std::string_view to_string(PeerFailure f) {
  switch (f) {
    case PeerFailure::unknown_peer:
      return "unknown_peer";
    case PeerFailure::unreachable:
      return "unreachable";
    case PeerFailure::disconnected:
      return "disconnected";
    case PeerFailure::refused:
      return "refused";
    case PeerFailure::no_reply:
      return "no_reply";
    case PeerFailure::backpressure:
      return "backpressure";
    case PeerFailure::left:
      return "left";
  }
  return "unknown";
}

PeerError::PeerError(PeerFailure failure, std::string peer_id, std::string address, const std::string& detail)
    : std::runtime_error("peer '" + peer_id + "' at " + address + ": " + detail),
      failure_(failure),
      peer_id_(std::move(peer_id)),
      address_(std::move(address)) {}

Payload Payload::borrow_f32(std::span<const float> values, std::shared_ptr<const void> keep_alive) {
  if (!keep_alive)
    throw std::invalid_argument(
        "Payload::borrow_f32: no keep_alive; without one the values could change or "
        "vanish while queued (use copy_f32)");
  Payload p;
  p.dtype_ = wire::Dtype::f32;
  p.count_ = values.size();
  if (!values.empty()) p.bytes_ = {reinterpret_cast<const std::uint8_t*>(values.data()), values.size_bytes()};
  p.owner_ = std::move(keep_alive);
  return p;
}

Payload Payload::copy_f32(std::span<const float> values) {
  auto copy = std::make_shared<const std::vector<float>>(values.begin(), values.end());
  const std::span<const float> view(*copy);
  return borrow_f32(view, std::move(copy));
}

Payload Payload::encode(wire::Dtype dtype, std::span<const float> values,
                        std::span<const std::uint32_t> int8_blocks) {
  const auto size = wire::payload_bytes(dtype, values.size());
  if (!size || dtype == wire::Dtype::none)
    throw std::invalid_argument("Payload::encode: cannot encode " + std::to_string(values.size()) +
                                " values as " + std::string(wire::to_string(dtype)));
  if (dtype != wire::Dtype::int8) int8_blocks = {};
  std::vector<std::uint8_t> bytes(wire::encoded_bytes(dtype, values.size(), int8_blocks));
  wire::encode_values(dtype, values, bytes, int8_blocks);
  return encoded(dtype, values.size(), std::move(bytes));
}

Payload Payload::encoded(wire::Dtype dtype, std::uint64_t count, std::vector<std::uint8_t> bytes) {
  if (dtype == wire::Dtype::none || !wire::payload_size_fits(dtype, count, bytes.size()))
    throw std::invalid_argument("Payload::encoded: " + std::to_string(bytes.size()) + " bytes are not " +
                                std::to_string(count) + " elements of " +
                                std::string(wire::to_string(dtype)));
  auto owned = std::make_shared<const std::vector<std::uint8_t>>(std::move(bytes));
  Payload p;
  p.dtype_ = dtype;
  p.count_ = count;
  p.bytes_ = std::span<const std::uint8_t>(*owned);
  p.owner_ = std::move(owned);
  return p;
}

void Message::decode_into(std::span<float> dst) const {
  if (dst.size() != header_.count)
    throw std::invalid_argument("Message::decode_into: message from '" + header_.sender + "' holds " +
                                std::to_string(header_.count) + " elements, destination has " +
                                std::to_string(dst.size()));
  if (dst.empty()) return;
  wire::decode_values(header_.dtype, payload_, dst);
}

std::vector<float> Message::decode() const {
  std::vector<float> values(header_.count);
  decode_into(values);
  return values;
}

std::span<const float> Message::f32_view() const noexcept {
  if (header_.dtype != wire::Dtype::f32 || payload_.size() != header_.count * sizeof(float)) return {};
  if (reinterpret_cast<std::uintptr_t>(payload_.data()) % alignof(float) != 0) return {};
  // The wire is little-endian f32; so is every machine hearsay builds for.
  return {reinterpret_cast<const float*>(payload_.data()), header_.count};
}

std::span<const float> Message::values(std::vector<float>& scratch) const {
  if (const auto view = f32_view(); view.size() == header_.count) return view;
  scratch.resize(header_.count);
  decode_into(scratch);
  return scratch;
}

bool is_reply(wire::MessageType t) {
  switch (t) {
    case wire::MessageType::welcome:
    case wire::MessageType::pong:
    case wire::MessageType::params_reply:
    case wire::MessageType::state_reply:
      return true;
    default:
      return false;
  }
}

namespace {

// A random start keeps nonces of a restarted peer from matching replies meant for its
// previous life.
std::uint64_t first_nonce() {
  std::random_device entropy;
  return (std::uint64_t{entropy()} << 32 | entropy()) | 1;
}

}  // namespace

Transport::Transport(Inbox::Limits limits, wire::Expectation expect)
    : inbox_(std::make_shared<Inbox>(limits)), expect_(std::move(expect)), nonce_(first_nonce()) {}

Transport::Transport(Transport& inner)
    : inbox_(inner.inbox_), expect_(inner.expect_), nonce_(first_nonce()) {}

std::uint64_t Transport::next_nonce() {
  std::uint64_t n = nonce_.fetch_add(1, std::memory_order_relaxed);
  return n == 0 ? nonce_.fetch_add(1, std::memory_order_relaxed) : n;
}

void Transport::stamp(wire::Header& header, const Payload& payload) const {
  if (wire::carries_payload(header.type) != payload.has_frame())
    throw std::invalid_argument("send: a " + std::string(wire::to_string(header.type)) + " message " +
                                (payload.has_frame() ? "carries no payload" : "needs a payload"));
  header.version = wire::kProtocolVersion;
  header.sender = id();
  header.run_id = expect_.run_id;
  header.fingerprint = expect_.fingerprint;
  header.dtype = payload.dtype();
  header.count = payload.count();
  header.checksum = payload.has_frame() ? wire::checksum(payload.bytes()) : 0;
  if (progress_) header.trained = progress_->own();
}

void Transport::send(const std::string& peer_id, wire::Header header, Payload payload) {
  inbox_->rethrow_pending(is_control(header.type) ? Inbox::Lane::control : Inbox::Lane::data);
  stamp(header, payload);
  transmit(peer_id, std::move(header), std::move(payload));
}

std::optional<Message> Transport::receive(Deadline deadline) { return inbox_->pop(deadline); }

std::optional<Message> Transport::receive_control(Deadline deadline,
                                                  const std::function<bool(const Message&)>& which,
                                                  std::optional<std::uint64_t> ticket) {
  return inbox_->pop(deadline, which, Inbox::Lane::control, ticket);
}

bool Transport::poll(Deadline deadline) { return inbox_->wait(deadline); }

Message Transport::request(const std::string& peer_id, wire::Header header, Payload payload,
                           Deadline deadline) {
  const std::uint64_t nonce = next_nonce();
  header.nonce = nonce;
  const wire::MessageType type = header.type;
  const auto start = Clock::now();
  send(peer_id, std::move(header), std::move(payload));
  // A reply travels in the lane of its request's exchange (welcome for hello,
  // state_reply for state_request, pong and params_reply for the others).
  const auto lane = is_control(type) ? Inbox::Lane::control : Inbox::Lane::data;
  auto reply = inbox_->pop(
      deadline,
      [&](const Message& m) {
        return m.header().nonce == nonce && m.sender() == peer_id && is_reply(m.type());
      },
      lane);
  if (!reply) {
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    throw PeerError(PeerFailure::no_reply, peer_id, address_of(peer_id),
                    "no answer to " + std::string(wire::to_string(type)) + " within " +
                        std::to_string(waited.count()) + " ms; is the peer alive and in this run?");
  }
  return std::move(*reply);
}

Clock::duration Transport::ping(const std::string& peer_id, Deadline deadline) {
  const auto start = Clock::now();
  wire::Header header;
  header.type = wire::MessageType::ping;
  request(peer_id, std::move(header), Payload{}, deadline);
  return Clock::now() - start;
}

}  // namespace hearsay::transport
