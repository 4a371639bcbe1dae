// Link emulation as a decorator of the Transport interface: an EmulatedTransport wraps
// any transport (ZeroMQ, the in-process fabric) and makes its links slower, lossy or cut,
// so that many peers on one machine behave like peers behind slower links. The wrapped
// transport knows nothing of it: what it sends is handed to it later, and it shows the
// decorator what arrives through its Tap (transport.hpp).
//
// Links (EmulationOptions::links, see link_emulator.hpp). When enabled, every message
// this transport sends (data, control, and the pongs it answers pings with) waits in a
// delay line and is lost, duplicated or held back to be overtaken at the link's rates: the
// sender-side model of link_emulator.hpp,
// one FIFO uplink at the peer's own rate and a path per destination at the slower link's
// rate, which the messages queue for, then the link's one-way delay. A
// thread of its own (hs-link) hands each message to the wrapped transport when it is
// due. What the wrapped transport does below the message level (ZeroMQ's handshakes and
// heartbeats) is not delayed. send() still throws at once for an unknown peer (neither
// connected nor heard from) and for backpressure once send_queue messages to that peer
// wait in the delay line; what goes wrong when a delayed message is finally handed over
// (the peer left, its queue is full) is a PeerError like the other asynchronous failures.
// When disabled, a message goes straight to the wrapped transport on the caller's thread.
//
// Where the delay is held (EmulationOptions::hold_at_receiver). By default the sender
// holds each message for its emulated time and then the real network carries it, so the
// real network's own time adds to the emulated one: nothing on a machine of its own, but
// on a box shared by many peers each message also waits for cores at every thread it
// passes. Peers of one box share its monotonic clock, so they can instead hold messages at
// the receiver: the sender takes the uplink and draws the loss as before, stamps the time
// its emulated link delivers the message (the header's `due`) and hands it over at once,
// on the caller's thread; the receiver's inbox keeps what arrives before its `due` out of
// sight until then (Inbox::hold_until_due), and what arrives later shows at once. A message
// then takes the longer of the emulated and the real time, not their sum, and no thread
// stands between its arrival and its reader. Pongs go out at once too (hs-link), stamped
// from the ping's `due`. The send queue is kept as above; a partition drops what is sent
// after it begins, not what is already on its way. A receiver in this mode holds stamped
// messages whether or not it emulates links itself.
//
// Partitions. set_blocked() names peers this one stops talking to, with or without link
// emulation: messages to them are dropped at send() (after its argument checks, without
// an error) or when their delay ends, and messages from them are dropped on arrival,
// before admission (neither accepted nor counted as dropped). An empty list heals.
//
// Receiving is the wrapped transport's: this one shares its inbox, so receive(), poll()
// and the control lane see what it admitted, with nothing in between.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "gossip/network/emulation/link_emulator.hpp"
#include "gossip/network/transport/transport.hpp"

namespace hearsay::emulation {

using Clock = hearsay::fiber::Clock;  // virtual time on a fiber::Scheduler's thread

struct EmulationOptions {
  LinkEmulation links;  // slow, lossy links; off unless links.enabled() (partitions only then)
  // Messages to one peer waiting in the delay line before send() refuses (as ZeroMQ's
  // send queue refuses them without emulation: give both the same number).
  int send_queue = 64;
  // How long the destructor lets delayed messages finish their delay (a bye sent just
  // before closing must still arrive); the rest is dropped.
  std::chrono::milliseconds linger{1'000};
  // Hold the delay at the receiver (above): only for peers that share one machine's clock.
  bool hold_at_receiver = false;
  // Keep the delay line even while no link is emulated, so that set_own_link can slow this
  // peer's link later (a link fault of the simulator that starts during the run).
  bool links_may_change = false;
};

// What link emulation and partitions did to this transport's messages.
struct EmulationCounters {
  std::uint64_t delayed = 0;           // put in the delay line (and not lost)
  std::uint64_t lost = 0;              // lost by the emulated link's loss draw
  std::uint64_t duplicated = 0;        // of those delayed, sent twice (dup)
  std::uint64_t reordered = 0;         // of those delayed, held back (reorder)
  std::uint64_t blocked_sent = 0;      // to a blocked peer, dropped
  std::uint64_t blocked_received = 0;  // from a blocked peer, dropped before delivery
};

class EmulatedTransport final : public transport::Transport, private transport::Transport::Tap {
 public:
  // Takes `inner` over (std::invalid_argument when null) and, with links, starts the
  // delay line's thread.
  EmulatedTransport(std::unique_ptr<transport::Transport> inner, EmulationOptions options);
  // Gives delayed messages up to `linger` to leave, then closes the wrapped transport.
  ~EmulatedTransport() override;

  const std::string& id() const override { return id_; }
  std::string address() const override { return inner_->address(); }
  void connect(const std::string& peer_id, const std::string& address) override;
  void connect_seed(const std::string& key, const std::string& address) override;
  void transmit(const std::string& peer_id, wire::Header header, transport::Payload payload) override;
  std::string address_of(const std::string& peer_id) const override { return inner_->address_of(peer_id); }
  transport::Counters counters() const override { return inner_->counters(); }

  // Stops talking to these peers (a network partition) until the next call; an empty
  // list heals. Replaces the previous list.
  void set_blocked(std::vector<std::string> peer_ids);
  // This peer's own access link from now on (none: back to EmulationOptions::links.self):
  // what it sends from now on crosses it. Messages already on their way keep their time.
  // std::logic_error without a delay line (neither links nor links_may_change).
  void set_own_link(const std::optional<LinkSpec>& link);
  EmulationCounters emulation_counters() const;
  // Whether links are emulated (not only partitions).
  bool emulates_links() const noexcept { return line_.has_value(); }
  transport::Transport& inner() noexcept { return *inner_; }

 private:
  // A message waiting in the delay line: what send() gave, or a pong.
  struct Outgoing {
    std::string peer;
    wire::Header header;         // stamped
    transport::Payload payload;  // keeps the caller's buffer alive until handed over
    bool pong = false;           // the answer to a ping: failures are not reported
  };

  // Tap: on the wrapped transport's receiving thread. Neither touches inner_: the wrapped
  // transport calls them until its thread stops, which is while the destructor destroys it,
  // with inner_ already empty.
  bool refuse(const std::string& sender) noexcept override;
  bool take(const wire::Header& header) noexcept override;

  bool is_blocked(const std::string& peer) const;
  void check_known(const std::string& peer) const;
  void delay(const std::string& peer, wire::Header header, transport::Payload payload);
  void send_stamped(const std::string& peer, wire::Header header, transport::Payload payload);
  // Takes the uplink for a message given at `at`: its release (none: lost), or throws the
  // backpressure error once send_queue messages to the peer are on their way.
  std::optional<LinkSchedule::Sent> take_uplink(const std::string& peer, std::uint64_t bytes, Outgoing out,
                                                Clock::time_point at);
  void count(const std::optional<LinkSchedule::Sent>& sent) noexcept;  // delayed or lost, and how
  // Whether send_queue messages to `peer` are on their way (line_mutex_ held).
  bool line_full_locked(const std::string& peer, Clock::time_point now);
  void run_pongs(std::unique_lock<std::mutex>& lock);  // the thread's loop, hold_at_receiver
  void delay_pong(const wire::Header& ping);
  void run();  // the delay line's thread
  void hand_over(Outgoing& out) noexcept;
  void report_late_failure(const std::string& peer, const std::exception& e) noexcept;

  std::unique_ptr<transport::Transport> inner_;
  const std::string id_;  // inner_'s, kept for the tap: a pong is stamped with it
  const EmulationOptions options_;
  std::atomic<std::uint64_t> delayed_{0}, lost_{0}, duplicated_{0}, reordered_{0}, blocked_sent_{0},
      blocked_received_{0};

  // Partitions, read by callers' threads, the wrapped transport's and the delay line's.
  mutable std::mutex blocked_mutex_;
  std::unordered_set<std::string> blocked_;
  std::atomic<bool> any_blocked_{false};  // whether `blocked_` is not empty: the cheap test

  // Peers send() may reach: connected, or heard from (links only).
  mutable std::mutex known_mutex_;
  std::unordered_set<std::string> known_;

  // The delay line (links only), guarded by line_mutex_.
  std::mutex line_mutex_;
  fiber::ConditionVariable line_changed_;
  std::optional<LinkEmulator<Outgoing>> line_;
  bool stopping_ = false;
  Clock::time_point stop_deadline_{};
  // hold_at_receiver: pongs for the thread to hand over at once (the tap may not send).
  std::vector<Outgoing> pongs_;
  fiber::Worker thread_;  // a fiber in virtual time
};

}  // namespace hearsay::emulation
