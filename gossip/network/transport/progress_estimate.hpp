// How far the whole run is, as one peer can tell from what it hears. Every message a peer
// sends carries the training steps it has taken (the header's `trained`, PROTOCOL.md); a
// receiver keeps, for each peer it heard from, the last count, when it heard it and the
// rate between two counts, and extrapolates: peer j is at steps_j + rate_j * (now - t_j),
// for at most kHorizonSteps of its steps, within [kMinHorizon, kHorizon] (a peer that fell
// silent is not assumed to train on for ever). A
// peer that said bye stays at its last count. Peers not heard from yet are taken to go at
// this peer's own pace. The sum over the world is the run's progress: the learning-rate
// schedule follows it (a fast peer does not run past the end of its schedule, nor a slow
// one stay at a high rate) and, with a global budget, the run ends when it reaches
// world x epochs x steps per epoch. Thread-safe: the trainer sets its own count, the
// transport's receiving thread reports what it heard.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "base/fiber.hpp"

namespace hearsay::transport {

class ProgressEstimate {
 public:
  using Clock = hearsay::fiber::Clock;
  static constexpr std::chrono::seconds kHorizon{10};
  static constexpr std::chrono::seconds kMinHorizon{2};
  static constexpr double kHorizonSteps = 20;

  // world: the run's peers, this one included (>= 1).
  explicit ProgressEstimate(int world);

  int world() const noexcept { return world_; }
  void set_own(std::uint64_t steps);
  std::uint64_t own() const;
  // What a message from `peer` said (steps > 0), received at `at`.
  void heard(const std::string& peer, std::uint64_t steps, Clock::time_point at);
  // `peer` left the run having taken `steps` (0: as last heard): it takes no more. Only a
  // higher count brings it back (it restarted from its last checkpoint and trained on);
  // one of its messages still on the way when it left does not.
  void left(const std::string& peer, std::uint64_t steps = 0);
  // Whether `peer` left the run (said bye) and has not been heard training since.
  bool has_left(const std::string& peer) const;
  // Steps taken by all peers together, as estimated at `now`.
  double total_steps(Clock::time_point now) const;
  // The median of the estimated steps of the other peers heard from that have not left (the
  // upper one of an even count; none: nobody heard from).
  std::optional<double> median_other(Clock::time_point now) const;

 private:
  struct Peer {
    std::uint64_t steps = 0;
    Clock::time_point at{};
    double rate = 0;  // steps per second, 0 until two counts were heard
    bool gone = false;
  };
  // Peer p's steps at `now`, extrapolated as above.
  static double estimated(const Peer& p, Clock::time_point now);

  const int world_;
  mutable std::mutex mutex_;
  std::uint64_t own_ = 0;
  std::map<std::string, Peer> peers_;
};

}  // namespace hearsay::transport
