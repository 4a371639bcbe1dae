// The training side, one part of a peer (peer_process.hpp): this peer's shard, the model,
// optimizer, schedule and training session, where the run is (TrainingPosition), the
// training loop with its hooks (model/training_loop.hpp), and what it writes: the metrics
// file, the progress line, checkpoints and parameter snapshots. It mixes through the
// mixer host (peer/mixer_host.hpp) and knows nothing of the network.
//
// Threads. The training thread calls everything but the three marked "any thread".
// state_mutex_ guards the parameters and optimizer state (and the step) between the
// training thread's update, the mixer's syncs done under it, and the copies other threads
// take (a state sent to a late joiner, the step /status shows); latest_mutex_ guards what
// /status shows of the last interval and the last evaluation.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/file_lock.hpp"
#include "base/rng.hpp"
#include "model/data/dataset.hpp"
#include "model/data/epoch_order.hpp"
#include "model/device.hpp"
#include "model/divergence.hpp"
#include "model/model.hpp"
#include "model/optim/optimizer.hpp"
#include "model/optim/schedule.hpp"
#include "model/trainer.hpp"
#include "model/training_loop.hpp"
#include "model/training_session.hpp"
#include "peer/metrics.hpp"
#include "peer/mixer_host.hpp"
#include "peer/peer_config.hpp"
#include "peer/run_budget.hpp"
#include "peer/run_output.hpp"
#include "peer/state_transfer.hpp"
#include "peer/status_server.hpp"

namespace hearsay {

class PeerTrainer {
 public:
  using Clock = std::chrono::steady_clock;

  // What the trainer is wired to (PeerProcess): the mixing of its parameters, the
  // counters its metrics show besides its own, and what runs after every step.
  struct Links {
    MixerHost* mixer = nullptr;                  // must outlive the trainer's use of it
    std::function<void(PeerMetrics&)> counters;  // exchanges, bytes, drops, live members
    std::function<void()> after_step;            // outside the state lock: pauses
  };

  // Loads this peer's shard (DataError when the dataset is missing) and builds the model,
  // optimizer, schedule and training session. started: when the process started (metrics'
  // time_s). stop: set (by a signal handler) to end the run.
  PeerTrainer(const PeerConfig& cfg, std::string id, const std::atomic<bool>& stop,
              Clock::time_point started);
  PeerTrainer(const PeerTrainer&) = delete;
  PeerTrainer& operator=(const PeerTrainer&) = delete;

  void link(Links links) { links_ = std::move(links); }

  // --resume: the checkpoint's parameters, optimizer state and position. PeerStartError
  // for a checkpoint of another --seed.
  void resume_from_checkpoint();
  // Goes on from a neighbour's training state (state_transfer.hpp), unless the run has not
  // started (its step 0). A peer new to the run keeps at least the last epoch to train
  // (Adopt::leave_last_epoch); a restarted one takes the neighbour's step as it is
  // (Adopt::at_its_step), so that it ends with the others instead of training on alone.
  enum class Adopt { leave_last_epoch, at_its_step };
  void adopt(PulledState pulled, Adopt how = Adopt::leave_last_epoch);

  // The run's epochs through run_training, with the hooks below.
  void train();
  // The end, normal or asked for: everything mixed so far goes into the parameters (a
  // failure of that last round is only logged).
  void flush_mixing_at_end();
  // Writes the last interval's metrics, as log_interval(true).
  void report_last_interval() { log_interval(true); }
  void save_checkpoint(const char* why);
  void write_final_record();

  // Everything mixed so far into the parameters, under the state lock.
  void flush_mixing();
  // The parameters and optimizer state for a late joiner (any thread).
  TrainingSnapshot snapshot_for_neighbour();
  // What /status and /metrics show of training (any thread); the counters are not filled.
  StatusServer::Snapshot status();
  // --slowdown, or the control file's (any thread).
  void set_slowdown(double slowdown) { slowdown_ = slowdown; }
  // Ends training after the current step, as a budget does (a simulator's `stop`; any thread).
  void end_training() { budget_->end(RunBudget::End::told); }
  // The run's progress this peer reports and estimates; null without --rank (the
  // transport carries it: Transport::set_progress).
  std::shared_ptr<transport::ProgressEstimate> run_progress() const { return run_progress_; }
  // This peer's shard over the mean shard (AlgorithmOptions::shard_share); 1 without ranks
  // or with --average-over peers.
  double shard_share() const noexcept { return shard_share_; }
  void write_record(const nlohmann::json& record) { metrics_file_.write(record); }

  ParameterStore& parameters() { return session_->parameters(); }
  std::int64_t parameter_count() const { return model_->param_count(); }
  std::string fingerprint() const { return model_->fingerprint(); }
  const Model& model() const { return *model_; }
  // Training thread.
  const TrainingPosition& position() const noexcept { return position_; }
  std::int64_t steps_per_epoch() const noexcept { return steps_per_epoch_; }
  bool resumed() const noexcept { return resumed_; }
  double seconds_since_start() const { return seconds(Clock::now() - started_); }

 private:
  void load_data_and_model();
  // Loop hooks.
  void after_gradients(const BatchStats& s,
                       std::chrono::nanoseconds took);  // emulated compute, a loss not finite
  void after_update(const StepReport& r);               // under state_mutex_: counters, mixing
  void after_step(const StepReport& r);                 // snapshots, progress, checkpoints, Links::after_step
  void after_epoch(const EpochReport& e);
  // After the host parameters changed outside a step (a restored or pulled state): the
  // training device takes them (a no-op on the CPU).
  void params_changed_on_host() { session_->params_from_host(); }
  void log_interval(bool force);
  // Records the divergence in the metrics and the log, and throws TrainingDiverged.
  [[noreturn]] void stop_diverged(const Divergence& d);
  void evaluate_epoch(double epoch_seconds);
  void save_snapshot_if_due();  // --snapshot-every
  bool stopping() const { return stop_.load(); }
  const std::vector<std::int64_t>& epoch_order(std::int64_t epoch);  // the data order of an epoch

  const PeerConfig& cfg_;
  const std::string id_;
  const std::atomic<bool>& stop_;
  const Clock::time_point started_;
  Links links_;

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
  std::optional<EpochOrder> order_;  // the shard's order, epoch by epoch (load_data_and_model)
  std::int64_t steps_per_epoch_ = 0, total_steps_ = 0;
  std::shared_ptr<transport::ProgressEstimate> run_progress_;
  std::unique_ptr<RunBudget> budget_;  // what ends training; schedule_ follows it (plan_run)
  double shard_share_ = 1.0;

  // Where the run is (the checkpoint's TrainingState fields).
  TrainingPosition position_;
  bool resumed_ = false;
  std::int64_t steps_this_run_ = 0;    // steps taken by this process (the first is always reported)
  std::optional<PulledState> pulled_;  // the state we started from, when pulled

  // Guards the parameters and optimizer state against snapshots from other threads.
  mutable std::mutex state_mutex_;
  // Guards what the HTTP server shows.
  mutable std::mutex latest_mutex_;
  PeerMetrics latest_;
  double last_test_acc_ = -1, last_test_loss_ = -1;
  std::int64_t evaluated_step_ = -1;  // the step of the last test-set evaluation (-1: none)

  // Output. Both are taken before the data loads, so that a second peer given the same
  // files fails at once, before it writes anything.
  JsonLinesFile metrics_file_;
  std::optional<FileLock> checkpoint_lock_;  // DIR/.lock of --checkpoint DIR
  ProgressLine progress_;
  BatchStats interval_stats_;
  Clock::time_point interval_start_ = Clock::now();
  std::optional<DivergenceWatch> divergence_;  // fed every interval (load_data_and_model)
  Clock::time_point next_checkpoint_{};
  std::atomic<std::uint64_t> checkpoints_written_{0}, checkpoint_failures_{0};  // read by status()
  std::int64_t next_snapshot_ = 1;  // the number K of the next params-K.f32

  std::atomic<double> slowdown_{1};  // --slowdown, or what the control file says now
};

}  // namespace hearsay
