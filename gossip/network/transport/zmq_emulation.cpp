// The I/O thread's side of link emulation (link_emulator.hpp): messages go into the
// delay line instead of ZeroMQ, and come out of it, in release order, each time the loop
// runs; the loop's poll wakes for the next release (next_timeout_ms). Partitions drop
// messages to a blocked peer here too, when they were on their way as it was blocked.
#include <algorithm>

#include "base/log.hpp"
#include "gossip/network/transport/zmq_impl.hpp"

namespace hearsay::transport {

void ZmqTransport::Impl::delay_message(Command& command) {
  const std::string& peer = command.peer;
  const auto link = links.find(peer);
  const std::string address = link != links.end() ? link->second->address : "(no address)";
  // The checks send() makes without emulation, made now: later there is no caller to tell.
  if (link == links.end() && !router_peers.contains(peer))
    throw PeerError(PeerFailure::unknown_peer, peer, address,
                    "not connected and no connection from it: call connect() with its address first");
  if (emulator->queued(peer) >= static_cast<std::size_t>(std::max(1, options.send_queue)))
    throw PeerError(PeerFailure::backpressure, peer, address,
                    std::to_string(options.send_queue) +
                        " messages already wait in the emulated link to it: the link is too slow for this "
                        "traffic");
  Outgoing out;
  out.peer = peer;
  out.header = std::move(command.header);
  out.payload = std::move(command.payload);
  out.has_payload = command.has_payload;
  const std::uint64_t bytes = out.header.size() + out.payload.size();
  if (emulator->push(peer, bytes, std::move(out), Clock::now()))
    delayed.fetch_add(1, std::memory_order_relaxed);
  else
    lost.fetch_add(1, std::memory_order_relaxed);
}

void ZmqTransport::Impl::delay_pong(const std::string& identity, const std::vector<std::uint8_t>& bytes,
                                    bool via_router) {
  if (emulator->queued(identity) >= static_cast<std::size_t>(std::max(1, options.send_queue)))
    return;  // as with a full ZeroMQ queue: it will ping again
  Outgoing out;
  out.peer = identity;
  out.header = zmq::message_t(bytes.data(), bytes.size());
  out.pong = true;
  out.via_router = via_router;
  const std::uint64_t size = out.header.size();
  if (emulator->push(identity, size, std::move(out), Clock::now()))
    delayed.fetch_add(1, std::memory_order_relaxed);
  else
    lost.fetch_add(1, std::memory_order_relaxed);
}

void ZmqTransport::Impl::release_due() {
  emulator->pop_due(Clock::now(), [this](Outgoing& out) { hand_over(out); });
}

void ZmqTransport::Impl::hand_over(Outgoing& out) noexcept {
  if (out.pong) {
    try {
      if (any_blocked.load() && is_blocked(out.peer)) {
        blocked_sent.fetch_add(1, std::memory_order_relaxed);
      } else if (out.via_router) {
        if (router.send(zmq::buffer(out.peer), zmq::send_flags::dontwait | zmq::send_flags::sndmore))
          (void)router.send(out.header, zmq::send_flags::dontwait);
      } else if (const auto link = links.find(out.peer); link != links.end()) {
        (void)link->second->dealer.send(out.header, zmq::send_flags::dontwait);
      }
    } catch (const std::exception&) {
      // The pinger is gone already: nobody to answer.
    }
    return;
  }
  // The caller's send() returned long ago: what fails now is an asynchronous PeerError.
  std::string address = "(no address)";
  try {
    if (any_blocked.load() && is_blocked(out.peer)) {  // partitioned while it was on its way
      blocked_sent.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    std::optional<PeerError> error;
    switch (send_frames(out.peer, out.header, out.payload, out.has_payload, address)) {
      case Handover::sent:
        return;
      case Handover::unknown_peer:
        error.emplace(PeerFailure::unknown_peer, out.peer, address,
                      "no connection from it any more when a message delayed by link emulation was due; "
                      "the message was dropped");
        break;
      case Handover::full:
        error.emplace(PeerFailure::backpressure, out.peer, address,
                      std::to_string(options.send_queue) +
                          " messages already queued for it when a message delayed by link emulation was due; "
                          "the message was dropped");
        break;
    }
    logging::debug("peer '" + options.id + "': " + error->what());
    inbox.push_error(std::make_exception_ptr(*error));
  } catch (const std::exception& e) {
    try {
      inbox.push_error(std::make_exception_ptr(
          PeerError(PeerFailure::disconnected, out.peer, address,
                    std::string("handing over a message delayed by link emulation failed: ") + e.what())));
    } catch (...) {
      // Out of memory while reporting: the message is lost either way.
    }
  }
}

// Stopping: delayed messages get up to `linger` to finish their emulated delay, as queued
// ones get it to leave ZeroMQ (a bye sent just before must still arrive); the rest is dropped.
void ZmqTransport::Impl::drain_delay_line() {
  const auto deadline = Clock::now() + options.linger;
  for (;;) {
    release_due();
    const auto due = emulator->next_due();
    if (!due || *due > deadline) break;
    zmq::pollitem_t item{wake_rx.handle(), 0, ZMQ_POLLIN, 0};
    const auto wait = std::chrono::ceil<std::chrono::milliseconds>(*due - Clock::now());
    if (poll_sockets(&item, 1, std::max(wait, std::chrono::milliseconds(0))) > 0) {
      zmq::message_t drain;  // nobody submits after stop; a stray wake-up must not spin
      while (wake_rx.recv(drain, zmq::recv_flags::dontwait)) {
      }
    }
  }
  emulator->clear();
}

bool ZmqTransport::Impl::is_blocked(const std::string& peer) const {
  std::lock_guard lock(blocked_mutex);
  return blocked.contains(peer);
}

}  // namespace hearsay::transport
