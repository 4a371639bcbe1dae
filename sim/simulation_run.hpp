// One simulated run as an object (what run_simulation does): set up in the constructor
// (the peers' command lines and files, the evaluation thread, the observer that pulls live
// peers' parameters), then run(): start the peers and lift their hold together; until
// they are done, look at them, apply the faults that are due, evaluate the points that are
// due and show progress; then evaluate the final parameters and say how the run ended.
// Each rank is one PeerRecord.
#pragma once
#include <sys/resource.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/log.hpp"
#include "gossip/network/transport/zmq_transport.hpp"
#include "sim/checkpoint_watch.hpp"
#include "sim/divergence_check.hpp"
#include "sim/evaluation_worker.hpp"
#include "sim/fault_log.hpp"
#include "sim/peer_cluster.hpp"
#include "sim/peer_record.hpp"
#include "sim/sim_run.hpp"

namespace hearsay::sim {

// A log level for the object's lifetime, the previous one back after it (also when the
// run throws).
class LogLevelFor {
 public:
  explicit LogLevelFor(logging::Level level) : previous_(logging::level()) { logging::set_level(level); }
  ~LogLevelFor() { logging::set_level(previous_); }
  LogLevelFor(const LogLevelFor&) = delete;
  LogLevelFor& operator=(const LogLevelFor&) = delete;

 private:
  logging::Level previous_;
};

class SimulationRun {
 public:
  using Clock = std::chrono::steady_clock;

  // Prepares the run in `dir` (the files of an earlier repeat there are removed) and
  // writes every peer's control file with its hold; starts nothing yet.
  SimulationRun(const SimConfig& cfg, const std::vector<Fault>& faults, const std::string& algo, int repeat,
                std::uint64_t seed, const TrainTest& data, const std::filesystem::path& dir);
  SimulationRun(const SimulationRun&) = delete;
  SimulationRun& operator=(const SimulationRun&) = delete;

  // Runs it, once. `stop` is polled: when it returns true the peers are stopped and the
  // run ends with status "interrupted".
  RunResult run(const std::function<void(const RunProgress&)>& progress, const std::function<bool()>& stop);

 private:
  // Where the run stands at one look.
  struct Look {
    double elapsed = 0;     // seconds since training began
    double samples = 0;     // trained by all peers, as their metrics say
    double run_epochs = 0;  // samples over the training set
    double budget_epochs = 0;  // the samples a global budget counts (budget_steps), over the training set
  };
  // A kill or restart given in epochs pauses its peer at `pause_step` until delivered.
  struct ScheduledFault {
    const Fault* fault;
    std::optional<std::int64_t> pause_step;
    bool delivered = false;
    bool in_force = false;              // a freeze or disk-full applied to its peer and not lifted yet
    rlim_t file_limit = RLIM_INFINITY;  // disk-full: the peer's limit before it
  };

  // Starting (sim_run.cpp).
  void start_peers();
  void spawn(PeerRecord& peer, std::vector<std::string> args, const std::vector<std::string>& seeds);
  void await_listening(PeerRecord& peer);
  void await_ready_to_train();
  void release_hold();
  // Watching.
  Look look();
  void read_metrics(PeerRecord& peer);
  void write_controls(double elapsed, double run_epochs);
  void end_if_budget_spent(const Look& now);
  void apply_due_faults(const Look& now);
  void deliver(std::size_t index, const Look& now, bool waits_for_it);
  void apply_due_spans(const Look& now);
  void impose(std::size_t index, const Look& now);
  void lift(std::size_t index, double elapsed, bool signal);
  void restart(PeerRecord& peer);
  void evaluate_due_points(const Look& now);
  void evaluate_snapshots();
  void evaluate_live(const Look& now);
  std::vector<PeerParams> read_snapshots(std::int64_t point);
  std::string timeout_status() const;
  void show_progress(const Look& now, const std::function<void(const RunProgress&)>& progress);
  // Ending (sim_run_end.cpp).
  RunResult finish();
  std::vector<PeerParams> final_parameters();
  std::string exit_status() const;
  void report_crashes() const;

  double seconds_since_start() const;
  // Bytes sent per peer so far (the mean over the run's peers), as their metrics last said.
  double sent_per_peer() const;

  const SimConfig& cfg_;
  const std::vector<Fault>& faults_;
  const std::string algo_;
  const double train_count_;  // examples in the training set
  const bool lockstep_;       // the algorithm's peers move in lockstep rounds
  const std::int64_t planned_steps_;  // each peer's
  const std::string run_id_;
  std::vector<PeerRecord> peers_;
  std::vector<ScheduledFault> schedule_;
  bool holding_ = true;        // every control file says hold until all peers are ready
  bool budget_spent_ = false;  // every control file says stop (end_if_budget_spent)
  // --peer-command with a model hearsay does not know: the script's own evaluation
  // (external_evaluator.hpp); null otherwise.
  std::shared_ptr<ExternalEvaluator> external_;
  EvaluationWorker worker_;
  LogLevelFor quiet_;                 // the observer's transport talks about every peer that leaves
  transport::ZmqTransport observer_;  // pulls live peers' parameters (state_request)
  PeerCluster cluster_;
  DivergenceCheck divergence_;
  FaultLog fault_log_;
  CheckpointWatch checkpoint_watch_;  // runs with faults: every checkpoint whole or absent
  RunResult result_;
  std::string status_;  // empty while the run goes on
  Clock::time_point launched_, start_;
  double eval_every_;            // epochs of the whole run between evaluation points
  const bool exact_steps_;       // points from snapshots at exact steps, else live pulls
  std::int64_t next_point_ = 1;  // exact steps: the next snapshot point
  double next_eval_;             // live: the run epochs of the next point
  Clock::time_point last_progress_;
};

}  // namespace hearsay::sim
