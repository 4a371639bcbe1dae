// One `hearsay peer`: loads its shard, joins the run, trains with gossip, reports, keeps
// checkpoints and leaves cleanly. run() reads like the life of a peer:
//
//   load the data and build the model            (a missing dataset stops here)
//   resume from the checkpoint, if asked          (optimizer state, step, epoch too)
//   bind, serve /metrics, start membership        (a port in use stops here)
//   join through the seeds                        (no answer in --join-timeout stops here)
//   wait for every rank (fixed graphs only)
//   pull a neighbour's state when joining late    (STATE, state_transfer.hpp)
//   wait while the control file says hold         (the simulator starts peers together)
//   train: step, mix, log, checkpoint; evaluate every epoch
//   flush the mixer, final checkpoint, say bye
//
// A stop request (SIGINT/SIGTERM) ends the step in progress and then does the last line.
// The training thread is the only one that touches the model; the mixer's thread, the
// state responder and the HTTP server see it through the mixer's syncs and snapshots
// taken under state_mutex_.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "gossip/mixing/algorithms/algorithm.hpp"
#include "gossip/mixing/algorithms/mixer.hpp"
#include "gossip/mixing/algorithms/partner_timing.hpp"
#include "gossip/mixing/algorithms/registry.hpp"
#include "gossip/network/emulation/control_file.hpp"
#include "gossip/network/membership/membership.hpp"
#include "gossip/mixing/topology/topology.hpp"
#include "gossip/network/transport/zmq_transport.hpp"
#include "model/checkpoint.hpp"
#include "model/data/dataset.hpp"
#include "model/device.hpp"
#include "model/divergence.hpp"
#include "model/model.hpp"
#include "model/optim/optimizer.hpp"
#include "model/optim/schedule.hpp"
#include "base/rng.hpp"
#include "model/trainer.hpp"
#include "model/training_loop.hpp"
#include "model/training_session.hpp"
#include "peer/metrics.hpp"
#include "peer/peer_config.hpp"
#include "peer/run_output.hpp"
#include "peer/state_transfer.hpp"
#include "peer/status_server.hpp"

namespace hearsay {

// A failure to start that the user must fix (no answer from the seeds, a rank that
// never came): run_peer prints the message as it is.
class PeerStartError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The training diverged (model/divergence.hpp): run_peer says where and exits 3.
class TrainingDiverged : public std::runtime_error {
 public:
  explicit TrainingDiverged(Divergence d) : std::runtime_error(d.describe()), divergence(std::move(d)) {}
  Divergence divergence;
};

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

  // Setting up (peer_process.cpp).
  void load_data_and_model();
  void resume_from_checkpoint();
  void open_network();
  void join_run();
  void wait_for_ranks();
  // Waits, woken by membership's news, until missing() is "" (it names what is missing,
  // for the progress line); throws PeerStartError(timed_out(missing())) after
  // --join-timeout; returns at once on a stop request.
  void await_members(const std::function<std::string()>& missing,
                     const std::function<std::string(const std::string&)>& timed_out);
  std::vector<std::string> live_neighbours() const;  // live members but this peer
  void pull_state_if_late();
  void align_rounds_with_neighbours();  // sets first_round_
  algorithms::PeerSet current_peer_set() const;
  void build_mixer();
  // While the control file says hold: writes a "ready" metrics record and waits.
  void wait_for_release();
  // At the control file's pause-at step: says so in the metrics and waits while it stays.
  void pause_if_asked();
  // The counters of m as they are now (any thread): exchanges, bytes, drops, live members.
  void fill_counters(PeerMetrics& m) const;
  void rebuild_mixer_if_members_changed();
  void retire_mixer();  // flushed already; keeps its totals
  TrainingSnapshot snapshot_for_neighbour();
  StatusServer::Snapshot http_snapshot();
  void leave();
  // Until membership changes (its version differs from seen) or `at_most` passes.
  void wait_for_member_change(std::uint64_t seen, Clock::duration at_most);

  // Training (peer_training.cpp).
  // The run's epochs through run_training (model/training_loop.hpp), with the hooks below.
  void train();
  void after_gradients(const BatchStats& s,
                       std::chrono::nanoseconds took);  // emulated compute, a loss not finite
  void after_update(const StepReport& r);               // under state_mutex_: counters, mixing
  void after_step(const StepReport& r);                 // snapshots, progress, checkpoints, members, pauses
  void after_epoch(const EpochReport& e);
  // After the host parameters changed outside a step (a restored or pulled state): the
  // training device takes them (a no-op on the CPU).
  void params_changed_on_host() { session_->params_from_host(); }
  void log_interval(bool force);
  // Records the divergence in the metrics and the log, and throws TrainingDiverged.
  [[noreturn]] void stop_diverged(const Divergence& d);
  void evaluate_epoch(double epoch_seconds);
  void save_checkpoint(const char* why);
  void save_snapshot_if_due();                     // --snapshot-every
  void apply_control(const emulation::PeerControl& control);  // --control-file, on the watcher's thread
  void write_final_record();
  bool stopping() const { return stop_.load(); }
  const std::vector<std::int64_t>& epoch_order(std::int64_t epoch);  // the data order of an epoch

  const PeerConfig& cfg_;
  // What the algorithm needs and does (gossip/mixing/algorithms/registry.hpp); null for --algo none.
  const algorithms::AlgorithmTraits* const traits_ = algorithms::find_algorithm(cfg_.gossip.algo);
  const std::atomic<bool>& stop_;
  const std::string id_;
  const Clock::time_point started_ = Clock::now();

  // Model and data.
  TrainTest data_;  // train: this peer's shard only, in shard order (load_data_and_model)
  std::unique_ptr<Model> model_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<LrSchedule> schedule_;
  DeviceChoice device_;
  // Parameters, gradients and optimizer state on device_. model_->params() is their host
  // copy, refreshed (under state_mutex_) where it is read: checkpoints, snapshots, a state
  // sent to a neighbour; the mixer reaches the parameters through session_->parameters().
  std::unique_ptr<TrainingSession> session_;
  std::uint64_t data_seed_ = 0;      // the epoch shuffles' seed
  std::vector<std::int64_t> order_;  // the data order of epoch order_epoch_
  Rng order_rng_{0};                 // the shuffles' source, as of order_epoch_
  std::int64_t order_epoch_ = -1;    // none built yet
  std::int64_t steps_per_epoch_ = 0, total_steps_ = 0;

  // Where the run is (the checkpoint's TrainingState fields).
  TrainingPosition position_;
  bool resumed_ = false;
  std::int64_t steps_this_run_ = 0;    // steps taken by this process (the first is always reported)
  std::optional<PulledState> pulled_;  // the state we started from, when pulled

  // Network.
  std::unique_ptr<transport::Transport> transport_;  // ZeroMQ, maybe inside link emulation
  std::unique_ptr<membership::Membership> membership_;
  std::unique_ptr<StateResponder> responder_;
  std::unique_ptr<StatusServer> http_;
  std::unique_ptr<emulation::ControlFileWatcher> control_;  // uses transport_
  std::optional<topology::Topology> graph_;
  std::unique_ptr<algorithms::Mixer> mixer_;
  std::vector<std::string> mixer_peers_;  // the PeerSet ids the mixer was built with
  // What the mixers learnt about partners (round trips, who is left out), kept across rebuilds.
  std::shared_ptr<algorithms::PartnerMemory> partner_memory_ = std::make_shared<algorithms::PartnerMemory>();
  std::uint64_t seen_members_version_ = 0;
  Clock::time_point next_member_check_{};
  // Guards mixer_'s replacement and retired_ against the HTTP thread's reads (fill_counters).
  mutable std::mutex live_mutex_;
  algorithms::ExchangeLog::Totals retired_;  // totals of the mixers replaced so far
  std::uint64_t rounds_retired_ = 0;
  std::uint64_t rounds_skipped_retired_ = 0;
  std::uint64_t first_round_ = 0;  // the first mixer's first round
  std::mutex members_mutex_;
  std::condition_variable members_changed_;  // notified by membership's thread and apply_control

  // Guards the parameters and optimizer state against snapshots from other threads.
  mutable std::mutex state_mutex_;
  // Guards what the HTTP server shows.
  mutable std::mutex latest_mutex_;
  PeerMetrics latest_;
  double last_test_acc_ = -1, last_test_loss_ = -1;

  // Output.
  JsonLinesFile metrics_file_;
  ProgressLine progress_;
  BatchStats interval_stats_;
  Clock::time_point interval_start_ = Clock::now();
  std::vector<double> interval_distances_;
  std::optional<DivergenceWatch> divergence_;  // fed every interval (load_data_and_model)
  Clock::time_point next_checkpoint_{};
  int checkpoints_written_ = 0;
  std::int64_t next_snapshot_ = 1;  // the number K of the next params-K.f32

  // Emulation: --slowdown, or what the control file says now.
  std::atomic<double> slowdown_{1};
  bool held_ = false;                     // the control file says hold (guarded by members_mutex_)
  std::optional<std::int64_t> pause_at_;  // the control file's pause-at (guarded by members_mutex_)
};

}  // namespace hearsay
