// STATE: how a peer that joins late, or restarts without a checkpoint, gets the current
// training state from a live neighbour instead of starting from a fresh model
// (docs/PROTOCOL.md section 4.5).
//
// A state_request (no payload) is answered with one state_reply echoing its nonce: the
// responder's `step` and, as f32, its parameters followed by its optimizer state,
// `parts` = [parameter count, optimizer-state count]. Both ride the transport's control
// lane, so neither the mixing algorithm nor membership sees them.
#pragma once
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "gossip/network/transport/transport.hpp"

namespace hearsay {

struct TrainingSnapshot {
  std::vector<float> params;
  std::vector<float> optimizer_state;
  std::uint64_t step = 0;
};

// Answers state_requests on its own thread with what `snapshot` returns (called once per
// request, on that thread). Peer errors the transport reports meanwhile are not its
// business and are ignored.
class StateResponder {
 public:
  using SnapshotFn = std::function<TrainingSnapshot()>;
  StateResponder(transport::Transport& transport, SnapshotFn snapshot);
  // Stops the thread (within about 100 ms). Never throws.
  ~StateResponder();
  StateResponder(const StateResponder&) = delete;
  StateResponder& operator=(const StateResponder&) = delete;

  std::uint64_t served() const noexcept { return served_.load(); }

 private:
  void run() noexcept;

  transport::Transport& transport_;
  SnapshotFn snapshot_;
  std::atomic<bool> stopping_{false};
  std::atomic<std::uint64_t> served_{0};
  std::thread thread_;
};

// Whether a peer resumed from its checkpoint at `own_step` goes on from a live
// neighbour's state at `their_step` instead: it restarted into a run under way and is
// behind it by more than a round (`every` steps) and a tenth of an epoch. Behind, its own
// state is stale: a lockstep peer would train the steps it lost alone after the others
// ended, and a gossip peer's old model would pull the average back at the end. Peers
// restarted together from one checkpoint are within that margin of each other, and each
// goes on from its own (an exact resume).
inline bool behind_the_run(std::uint64_t own_step, std::uint64_t their_step, std::int64_t steps_per_epoch,
                           std::uint64_t every) {
  const std::uint64_t margin = std::max<std::uint64_t>(std::max<std::uint64_t>(every, 1),
                                                       static_cast<std::uint64_t>(steps_per_epoch / 10));
  return their_step > own_step + margin;
}

struct PulledState {
  std::string from;  // the peer that answered
  TrainingSnapshot state;
};

// Asks the candidates one after the other, each with `timeout`, and returns the first
// well-formed answer: parts = [parameter_count, optimizer-state count] summing to the
// payload. A peer that does not answer in time, or answers with a state of another
// shape, is skipped (and logged). nullopt when none answered.
std::optional<PulledState> pull_state(transport::Transport& transport,
                                      std::span<const std::string> candidates, std::size_t parameter_count,
                                      std::chrono::steady_clock::duration timeout);

// Asks every peer at once and returns, in the order of `peers`, the well-formed answers
// that came before `timeout` (a peer answering with another shape is left out and
// logged). One silent or leaving peer costs the others nothing: all share the one
// deadline, and a PeerError about a peer only ends the wait for that peer. Asking one
// after the other, each with its own timeout, cost a timeout per peer that was leaving
// when asked, since the transport reports its going only once, to whichever call is
// waiting then. Late answers to earlier calls are discarded on the way.
std::vector<PulledState> pull_states(transport::Transport& transport, std::span<const std::string> peers,
                                     std::size_t parameter_count,
                                     std::chrono::steady_clock::duration timeout);

}  // namespace hearsay
