// An in-process transport for tests and single-process simulations: endpoints that
// share one InprocFabric exchange messages directly, one endpoint per thread.
//
// It is not a shortcut around the wire: every message is encoded to header bytes and a
// payload byte frame, and the receiver runs the same admission as the ZeroMQ transport
// (decode, identity, run, sizes, checksum, values), so wire bugs show up here too.
// Delivery is synchronous on the sending thread; the receiving endpoint's caller takes
// messages with receive() from its own thread. PINGs are answered by the fabric.
//
// The fabric can kill an endpoint: sends to it fail, and every endpoint that knew it
// gets a PeerError(disconnected) naming it on its next call. It can also lose messages
// at random (set_loss), as a lossy link would, and give one endpoint a bad link (a delay
// and a loss of its own, set_link_trouble), for tests of protocols that must survive them.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/rng.hpp"
#include "gossip/network/transport/transport.hpp"

namespace hearsay::transport {

class InprocTransport;

class InprocFabric {
 public:
  static std::shared_ptr<InprocFabric> create();

  // Kills endpoint id as a crash would: later sends to it and calls on it fail, and its
  // peers are told. Throws std::invalid_argument for an id that never registered.
  void kill(const std::string& id);
  // Hands raw frames to endpoint `to` as if the transport layer had received them from
  // `identity`: for tests of the refusal paths. The frames go through admission and
  // are counted like any others.
  void inject(const std::string& to, const std::string& identity,
              const std::vector<std::vector<std::uint8_t>>& frames);
  // From now on, each message sent between endpoints (not PING or PONG, which the
  // fabric answers itself, and not inject()ed frames) is silently dropped with this
  // probability, decided by an Rng seeded with seed, as a lossy link would drop it: the
  // sender's send() succeeds and the receiver never sees it. Only messages that would
  // otherwise have been delivered are drawn for. 0 turns loss off. std::invalid_argument
  // outside [0, 1].
  void set_loss(double probability, std::uint64_t seed);
  // Messages dropped by set_loss (and set_link_trouble) so far.
  std::uint64_t dropped_by_loss() const;
  // A bad link at endpoint id, both ways: from now on each message sent to or by it (PINGs
  // too, as a cut link drops them; not the PONGs the fabric answers them with, nor
  // inject()ed frames) is lost with probability `loss` (an Rng seeded with seed), and
  // otherwise delivered `delay` after its send, in send order, by a delivery thread of
  // the fabric. Where both ends have trouble the longer delay and
  // both losses apply. A delayed message that finds its receiver gone or full is lost,
  // as on a network. Zero delay and loss make the link healthy again.
  // std::invalid_argument for a negative delay or a loss outside [0, 1].
  void set_link_trouble(const std::string& id, std::chrono::nanoseconds delay, double loss,
                        std::uint64_t seed);
  ~InprocFabric();

  // The address an endpoint with this id has on the fabric.
  static std::string address_for(const std::string& id) { return "inproc-fabric:" + id; }

 private:
  friend class InprocTransport;
  struct Endpoint;
  InprocFabric() = default;
  std::shared_ptr<Endpoint> attach(const std::string& id, InprocTransport* owner);
  void detach(const std::string& id);
  std::shared_ptr<Endpoint> find(const std::string& id) const;
  // Runs admission at `to`; answers a PING there by delivering a PONG back.
  enum class Delivery { delivered, no_endpoint, killed, full };
  // lossy: whether set_loss may drop it.
  Delivery deliver(const std::string& to, const std::string& identity,
                   const std::vector<std::vector<std::uint8_t>>& frames, bool lossy);
  // Draws whether the next lossy message is lost (and counts it).
  bool lose();
  struct Trouble {
    std::chrono::nanoseconds delay{0};
    double loss = 0;
    Rng rng{0};
  };
  // The delay of a message between the two endpoints, and whether their troubles lose it.
  struct Fate {
    std::chrono::nanoseconds delay{0};
    bool lost = false;
  };
  Fate fate(const std::string& from, const std::string& to);
  // Holds frames for their release time (starting the delivery thread on first use).
  void hold(std::chrono::steady_clock::time_point release, const std::string& to, const std::string& from,
            std::vector<std::vector<std::uint8_t>> frames);
  void deliver_held();  // the delivery thread

  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Endpoint>> endpoints_;
  mutable std::mutex loss_mutex_;  // the loss RNG is shared by all sending threads
  double loss_probability_ = 0;
  Rng loss_rng_{0};
  std::uint64_t dropped_by_loss_ = 0;
  std::map<std::string, Trouble> troubles_;  // guarded by loss_mutex_

  struct Held {
    std::chrono::steady_clock::time_point release;
    std::uint64_t sequence = 0;
    std::string to, from;
    std::vector<std::vector<std::uint8_t>> frames;
  };
  std::mutex held_mutex_;
  std::condition_variable held_changed_;
  std::vector<Held> held_;  // a heap, earliest release (then earliest sent) on top
  std::uint64_t held_sequence_ = 0;
  bool stopping_ = false;
  std::thread delivery_;  // started by the first held message
};

struct InprocOptions {
  std::string id;
  wire::Expectation expect;
  std::uint64_t max_payload_bytes = std::uint64_t{1} << 30;
  Inbox::Limits inbox{};
};

class InprocTransport final : public Transport {
 public:
  // Registers options.id on the fabric; throws std::invalid_argument when the id is
  // empty, too long for a routing id, or already taken.
  InprocTransport(std::shared_ptr<InprocFabric> fabric, InprocOptions options);
  ~InprocTransport() override;

  const std::string& id() const override { return options_.id; }
  std::string address() const override { return InprocFabric::address_for(options_.id); }
  void connect(const std::string& peer_id, const std::string& address) override;
  void transmit(const std::string& peer_id, wire::Header header, Payload payload) override;
  std::string address_of(const std::string& peer_id) const override;
  Counters counters() const override;

 private:
  friend class InprocFabric;
  // Admission of frames from identity; returns the PONG header to send back, if any.
  // Called by the fabric with the endpoint lock held.
  std::optional<wire::Header> accept(const std::string& identity,
                                     const std::vector<std::vector<std::uint8_t>>& frames);
  void peer_killed(const std::string& peer_id);
  void check_alive() const;

  std::shared_ptr<InprocFabric> fabric_;
  InprocOptions options_;
  std::shared_ptr<InprocFabric::Endpoint> endpoint_;
  wire::DropCounters counters_;
  wire::DropLogger drop_log_;
  mutable std::mutex peers_mutex_;
  std::map<std::string, std::string> connected_;  // peer id -> address given to connect()
  std::set<std::string> heard_from_;              // peers whose messages were accepted
};

}  // namespace hearsay::transport
