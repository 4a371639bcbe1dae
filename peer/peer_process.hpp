// One `hearsay peer`: loads its shard, joins the run, trains with gossip, reports, keeps
// checkpoints and leaves cleanly. run() reads like the life of a peer:
//
//   load the data and build the model            (a missing dataset stops here)
//   resume from the checkpoint, if asked          (optimizer state, step, epoch too)
//   bind, serve /metrics, start membership        (a port in use stops here)
//   join through the seeds                        (no answer in --join-timeout stops here)
//   wait for every rank (fixed graphs only)
//   pull a neighbour's state when joining late    (STATE, state_transfer.hpp)
//   start the mixer
//   wait while the control file says hold         (the simulator starts peers together)
//   train: step, mix, log, checkpoint; evaluate every epoch
//   flush the mixer, final checkpoint, say bye
//
// A stop request (SIGINT/SIGTERM) ends the step in progress and then does the last line.
//
// PeerProcess is the composition of three parts, each with one job:
//   PeerTrainer (peer_trainer.hpp)   the model, session, optimizer, the loop and its
//                                    hooks, metrics and checkpoints;
//   NetworkNode (network_node.hpp)   the transport, membership, the state responder and
//                                    the HTTP status server;
//   MixerHost (mixer_host.hpp)       the Mixer and its algorithm, membership's changes
//                                    handed to it, the mixing totals.
// It wires them together (who calls whom on which thread: docs/ARCHITECTURE.md), and
// itself keeps the control file's settings (partitions, slowdown, hold, pause-at).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "gossip/mixing/algorithms/registry.hpp"
#include "gossip/network/emulation/control_file.hpp"
#include "peer/mixer_host.hpp"
#include "peer/network_node.hpp"
#include "peer/peer_config.hpp"
#include "peer/peer_errors.hpp"
#include "peer/peer_trainer.hpp"

namespace hearsay {

class PeerProcess {
 public:
  // cfg must have passed validate(). stop: set (by a signal handler) to end the run.
  PeerProcess(const PeerConfig& cfg, const std::atomic<bool>& stop);
  ~PeerProcess();
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;

  // Returns the exit code: 0 when training finished or was stopped cleanly. Throws
  // DataError, PeerStartError, TrainingDiverged, transport errors and std::runtime_error
  // on failures.
  int run();

 private:
  using Clock = std::chrono::steady_clock;

  void open_network();
  void pull_state_if_late();
  // The round the mixer starts at: this peer's own, or, for a graph algorithm's peer that
  // resumed, the round its neighbours are in.
  std::uint64_t first_round();
  void start_mixer();
  // The counters of m as they are now (any thread): exchanges, bytes, drops, live members.
  void fill_counters(PeerMetrics& m) const;
  StatusServer::Snapshot http_snapshot();

  // The control file (--control-file), on the watcher's thread.
  void apply_control(const emulation::PeerControl& control);
  // While the control file says hold: writes a "ready" metrics record and waits.
  void wait_for_release();
  // At the control file's pause-at step: says so in the metrics and waits while it stays.
  void pause_if_asked();
  bool stopping() const { return stop_.load(); }

  // What the peer is doing, for /status's "state" (hearsay watch shows it): set by the
  // main thread as run() goes, read by hs-http.
  enum class Phase { joining, waiting, held, training, paused, ending };
  static const char* to_string(Phase phase);

  const PeerConfig& cfg_;
  // What the algorithm needs and does (gossip/mixing/algorithms/registry.hpp); null for --algo none.
  const algorithms::AlgorithmTraits* const traits_ = algorithms::find_algorithm(cfg_.mixing.algo);
  const std::atomic<bool>& stop_;
  const std::string id_;
  const Clock::time_point started_ = Clock::now();

  // The parts, in the order they are built; destroyed the other way round (the mixer uses
  // the transport and the session's buffers, the network's threads the trainer).
  std::unique_ptr<PeerTrainer> trainer_;
  std::unique_ptr<NetworkNode> network_;
  MixerHost mixer_;
  std::unique_ptr<emulation::ControlFileWatcher> control_;  // uses the transport and the trainer

  // The control file's hold and pause-at, for the training thread's waits.
  std::mutex control_mutex_;
  std::condition_variable control_changed_;
  bool held_ = false;                     // guarded by control_mutex_
  std::optional<std::int64_t> pause_at_;  // guarded by control_mutex_
  std::atomic<Phase> phase_{Phase::joining};
};

}  // namespace hearsay
