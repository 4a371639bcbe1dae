// The transport interface: how one peer sends wire messages to others and receives
// theirs. In the spirit of gloo's context -> pair -> buffer, reduced to what gossip
// needs: a Transport is one peer's endpoint, connect() names another peer, send()
// hands it one message (header + optional payload), receive() takes the next accepted
// message from anyone.
//
// Everything a remote sends goes through the same admission (admission.hpp) before it
// is delivered: frame count, header size, MessagePack decoding, the sender's identity,
// run and model, sizes, checksum and finite values. Refused messages are counted per
// wire::DropReason and never reach the caller.
//
// Every member function may be called from any thread, concurrently.
//
// Failures of a peer (connection refused or lost, no reply in time) surface as
// PeerError on the caller's thread: the background I/O stores them and the next
// send/receive/poll/request call rethrows them, oldest first, one per call.
//
// Control messages (hello, welcome, members, bye, state_request, state_reply; see
// is_control in inbox.hpp) are queued apart from the others: receive_control() takes
// them, on membership's own thread, and receive()/poll()/ready() never see them, so an
// algorithm on the communication thread cannot swallow them. Each PeerError is queued
// for both sides: receive() and receive_control() each rethrow it once, and send()
// rethrows those of the side its message's type belongs to.
//
// A transport can be wrapped by another (a decorator, such as the link emulation of
// gossip/network/emulation/): the wrapper shares its inbox, sends through its transmit(),
// and sees its arrivals through a Tap. A transport without one pays a null test per
// message for that, and knows nothing of what wraps it.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/fiber.hpp"
#include "gossip/network/transport/inbox.hpp"
#include "gossip/network/transport/message.hpp"
#include "gossip/network/wire/drop_counters.hpp"
#include "gossip/network/wire/header.hpp"

namespace hearsay::transport {

// Virtual time on a fiber::Scheduler's thread (`hearsay sim --engine virtual`), else steady_clock.
using Clock = hearsay::fiber::Clock;
using Deadline = Clock::time_point;

// What went wrong with a peer.
enum class PeerFailure {
  unknown_peer,  // never connected and not reachable through an incoming connection
  unreachable,   // no connection could be made before the connect timeout
  disconnected,  // an established connection was lost (process died, machine gone)
  refused,       // the peer rejected us (CURVE key not authorized, protocol mismatch)
  no_reply,      // a request got no answer before its deadline
  backpressure,  // too many messages already queued for this peer
  left,          // its connection closed after it said bye: it left the run on purpose
};
std::string_view to_string(PeerFailure f);

// A remote peer broke. The message names the peer id and its address and says what to
// check; peer_id()/address()/failure() let callers react (e.g. drop it from a view).
class PeerError : public std::runtime_error {
 public:
  PeerError(PeerFailure failure, std::string peer_id, std::string address, const std::string& detail);
  PeerFailure failure() const noexcept { return failure_; }
  const std::string& peer_id() const noexcept { return peer_id_; }
  const std::string& address() const noexcept { return address_; }

 private:
  PeerFailure failure_;
  std::string peer_id_;
  std::string address_;
};

// A local problem, not a peer's: a bind that failed, bad keys, an address that does not
// parse, use after shutdown.
class TransportError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The payload of one outgoing message, if any.
class Payload {
 public:
  // No payload (ping, params_pull, hello, ...).
  Payload() = default;

  // f32 values sent as they are, with no copy: ZeroMQ hands this memory to the kernel.
  // The transport holds `keep_alive` (required, std::invalid_argument when null) until
  // the bytes have left or the message was dropped, and releases it from any thread;
  // the caller must not change the values before that. To learn when, give keep_alive
  // a deleter that signals. This is the fast path: for 100 MB it beat one copy into the
  // message in bench_transport (the copy costs a fresh 100 MB allocation and its page
  // faults on every send).
  static Payload borrow_f32(std::span<const float> values, std::shared_ptr<const void> keep_alive);
  // f32 values copied once, now (into a buffer then borrowed): the caller may change its
  // buffer as soon as this returns.
  static Payload copy_f32(std::span<const float> values);
  // Values compressed to dtype (f16, bf16, int8; f32 too) by wire::encode_values, int8 in
  // `int8_blocks` (wire::int8_blocks; empty: the default blocks).
  static Payload encode(wire::Dtype dtype, std::span<const float> values,
                        std::span<const std::uint32_t> int8_blocks = {});
  // Bytes already encoded by wire::encode_values for `count` elements of dtype (or by a
  // compressor, as Dtype::compressed), handed over by move. Throws std::invalid_argument
  // when the size does not fit (wire::payload_size_fits).
  static Payload encoded(wire::Dtype dtype, std::uint64_t count, std::vector<std::uint8_t> bytes);

  bool has_frame() const noexcept { return dtype_ != wire::Dtype::none; }
  wire::Dtype dtype() const noexcept { return dtype_; }
  std::uint64_t count() const noexcept { return count_; }
  std::span<const std::uint8_t> bytes() const noexcept { return bytes_; }
  // Keeps bytes() valid; the transport holds a copy of it until the bytes have left.
  const std::shared_ptr<const void>& owner() const noexcept { return owner_; }

 private:
  wire::Dtype dtype_ = wire::Dtype::none;
  std::uint64_t count_ = 0;
  std::span<const std::uint8_t> bytes_;
  std::shared_ptr<const void> owner_;
};

// Accepted and dropped messages so far.
using Counters = wire::DropCounters::Snapshot;

// True for the message types that answer a request (and echo its nonce).
bool is_reply(wire::MessageType t);

class Transport {
 public:
  virtual ~Transport() = default;
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // This peer's id: the `sender` of everything it sends and its routing identity.
  virtual const std::string& id() const = 0;
  // Where others reach this peer, to pass to their connect(): the bound endpoint with
  // the port read back (and, with CURVE, the public key; see zmq_transport.hpp).
  virtual std::string address() const = 0;
  // Makes peer_id reachable at address for send(). Connecting again replaces the
  // address. Throws TransportError when the address does not parse.
  virtual void connect(const std::string& peer_id, const std::string& address) = 0;
  // connect() for a seed a joiner says hello to, under `key` (its id is not known yet).
  // Over ZeroMQ the connection has an identity of its own (admission.hpp, Route::joiner),
  // so that the hello reaches the seed even when this peer's id is taken there, and the
  // seed's `refused` comes back over it. Other transports connect as connect() does.
  virtual void connect_seed(const std::string& key, const std::string& address) { connect(key, address); }
  // Sends one message to peer_id. The transport fills in version, sender, run id and
  // fingerprint (from its Expectation), dtype, count and checksum (from the payload);
  // everything else (type, step, weight, offset, nonce, extras) is the caller's.
  // A payload is required exactly for the types that carry one (wire::carries_payload),
  // otherwise std::invalid_argument. Throws PeerError for an unknown peer or a peer that
  // cannot take more, and rethrows a pending PeerError first. (It rethrows, stamps, and
  // calls transmit().)
  void send(const std::string& peer_id, wire::Header header, Payload payload = {});
  // The address peer_id was connected at, or "(no address)" for a peer that only
  // reached us through its own connection.
  virtual std::string address_of(const std::string& peer_id) const = 0;
  virtual Counters counters() const = 0;

  // The next accepted message, or nullopt when none arrived before the deadline.
  std::optional<Message> receive(Deadline deadline);
  std::optional<Message> receive(Clock::duration timeout) { return receive(Clock::now() + timeout); }
  // Waits until a message can be received (true) or the deadline passes (false).
  bool poll(Deadline deadline);
  // The run's progress: every message sent carries this peer's steps from it, and every
  // message received tells it the sender's (progress_estimate.hpp). Set before the first
  // send; null (the default): nothing is said or heard.
  void set_progress(std::shared_ptr<ProgressEstimate> progress) {
    inbox_->set_progress(progress);
    progress_ = std::move(progress);
  }
  // The run's progress as set_progress gave it (nullptr: none): who left the run among it.
  const ProgressEstimate* progress() const noexcept { return progress_.get(); }
  // Waits until a message or a stored PeerError is waiting (true) or the deadline passes
  // (false), taking and throwing nothing: for a thread that must not hold a lock while
  // it waits, and leaves the receiving and the errors to the next receive().
  bool ready(Deadline deadline) const { return inbox_->ready(deadline); }
  // ready() that also returns once wake() was called after wake_ticket() gave `ticket`:
  // how a thread waiting for partners is told about other work without polling.
  bool ready(Deadline deadline, std::uint64_t ticket) const { return inbox_->ready(deadline, ticket); }
  std::uint64_t wake_ticket() const { return inbox_->wakes(); }
  void wake() { inbox_->wake(); }
  // The next accepted control message (matching `which`, when given), or nullopt when
  // none arrived before the deadline, or (with a ticket from control_wake_ticket()) once
  // wake_control() was called since. Rethrows pending PeerErrors like receive().
  std::optional<Message> receive_control(Deadline deadline,
                                         const std::function<bool(const Message&)>& which = {},
                                         std::optional<std::uint64_t> ticket = std::nullopt);
  // How the threads reading the control lane (membership, the state responder) are told
  // to stop: they take a ticket before checking their stop flag, and wait with it.
  std::uint64_t control_wake_ticket() const { return inbox_->wakes(Inbox::Lane::control); }
  void wake_control() { inbox_->wake(Inbox::Lane::control); }
  std::optional<Message> receive_control(Clock::duration timeout) {
    return receive_control(Clock::now() + timeout);
  }
  // Control messages dropped unread because the control queue was full.
  std::uint64_t control_overflow() const { return inbox_->control_overflow(); }
  // Sends a request with a fresh nonce and waits for the message from peer_id that
  // echoes it; messages from others that arrive meanwhile stay queued for receive()
  // (or receive_control(): a control request, e.g. state_request, waits on that side).
  // Throws PeerError(no_reply) when nothing came back before the deadline.
  Message request(const std::string& peer_id, wire::Header header, Payload payload, Deadline deadline);
  // Round trip of a PING to peer_id (answered by its transport, not its caller).
  Clock::duration ping(const std::string& peer_id, Deadline deadline);

  // ---- For a transport that wraps another (a decorator: emulation::EmulatedTransport) ----
  // The second half of send(): hands a message that send() has stamped to the network,
  // rethrowing nothing pending (those errors are for the caller's next call). A decorator
  // calls its wrapped transport's, on its own thread, for what its caller sent earlier.
  // Throws as send() does for an unknown peer, a full one, or an oversized payload.
  virtual void transmit(const std::string& peer_id, wire::Header header, Payload payload) = 0;

  // What a decorator sees of the messages that reach the transport it wraps, called on
  // the thread that takes them in (the I/O thread, the fabric's sender): it must be quick,
  // must not throw, and must not call into the wrapped transport.
  class Tap {
   public:
    // Whether a message from `sender` is dropped on arrival, before admission: neither
    // accepted nor counted as dropped.
    virtual bool refuse(const std::string& sender) noexcept = 0;
    // Called for every admitted message before it is delivered or answered (a ping):
    // true when the tap takes it over, and the transport does neither.
    virtual bool take(const wire::Header& header) noexcept = 0;

   protected:
    ~Tap() = default;
  };
  // Installs the tap (nullptr: none). It must outlive this transport's receiving threads.
  void set_tap(Tap* tap) noexcept { tap_.store(tap, std::memory_order_release); }

 protected:
  Transport(Inbox::Limits limits, wire::Expectation expect);
  // A decorator of `inner`: it shares inner's inbox (what inner admits is what this one
  // receives, errors included) and its expectation.
  explicit Transport(Transport& inner);
  Inbox& inbox() noexcept { return *inbox_; }
  const Inbox& inbox() const noexcept { return *inbox_; }
  const wire::Expectation& expectation() const noexcept { return expect_; }
  // Fills in the fields send() owns and checks the payload against the type.
  void stamp(wire::Header& header, const Payload& payload) const;
  // For implementations, on their receiving thread: the tap's verdicts (false without one).
  bool tap_refuses(const std::string& sender) const noexcept {
    Tap* tap = tap_.load(std::memory_order_acquire);
    return tap != nullptr && tap->refuse(sender);
  }
  bool tap_takes(const wire::Header& header) const noexcept {
    Tap* tap = tap_.load(std::memory_order_acquire);
    return tap != nullptr && tap->take(header);
  }

 private:
  std::uint64_t next_nonce();

  std::shared_ptr<Inbox> inbox_;
  std::shared_ptr<ProgressEstimate> progress_;
  wire::Expectation expect_;
  std::atomic<std::uint64_t> nonce_;
  std::atomic<Tap*> tap_{nullptr};
};

}  // namespace hearsay::transport
