// What ends a peer's training, and which step the learning-rate schedule is at
// (BudgetConfig in peer_config.hpp; docs/ARCHITECTURE.md, "Budgets").
//
// Per peer, or for an algorithm that cannot lose a peer (all-reduce: every peer must take
// the same steps), the run is --epochs of this peer's epochs and the schedule is at this
// peer's step. With a global budget for an asynchronous algorithm, the run is world x
// epochs x steps-per-epoch steps of all peers together: the schedule is at the run's
// estimated progress in per-peer steps (ProgressEstimate), so a fast peer and a slow one
// decay together, and training ends when that estimate reaches the budget, unless a
// simulator, which counts every peer's steps exactly, ends it (its control file's `stop`).
// A time budget ends training after that long, either way.
//
// Lockstep algorithms (D-PSGD, local SGD, SGP without overlap) have every peer at step K
// together while nothing goes wrong: a lockstep peer's schedule is at its own step (so runs
// repeat exactly), and it ends at its planned steps, as every other peer does. Under a
// global budget, though, one that is then well ahead of most peers it hears from trains on
// (the run's budget, or the simulator, ends it): counting its own steps, a peer that a
// partition raced ahead of the others ended alone and early, and its model stayed apart
// from theirs to the end (soak: local SGD 3 to 13 points under the healthy run). Now it
// mixes with them again once they are back, at the end of its schedule.
#pragma once
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "gossip/network/transport/progress_estimate.hpp"
#include "model/data/epoch_order.hpp"
#include "model/optim/schedule.hpp"
#include "peer/peer_config.hpp"

namespace hearsay {

class RunBudget {
 public:
  using Clock = transport::ProgressEstimate::Clock;
  enum class End { none, epochs, global, time, told };

  // progress: the estimate the peer's transport feeds (may be null for per-peer budgets).
  // ended_by_simulator: a simulator ends a global budget (--control-file), not the estimate.
  // lockstep: the algorithm's peers are at step K together; per_peer_only: it cannot lose a
  // peer, so its budget is always the peer's own (all-reduce).
  RunBudget(const BudgetConfig& cfg, bool lockstep, bool per_peer_only, double epochs,
            std::int64_t steps_per_epoch, std::shared_ptr<transport::ProgressEstimate> progress,
            bool ended_by_simulator)
      : global_(cfg.global() && !per_peer_only && progress != nullptr),
        lockstep_(lockstep),
        time_(cfg.time),
        epochs_(epochs),
        steps_per_epoch_(steps_per_epoch),
        progress_(std::move(progress)),
        ended_by_simulator_(ended_by_simulator) {}

  bool global() const noexcept { return global_; }
  // Whether the schedule is at the run's estimated step rather than this peer's own.
  bool schedule_follows_run() const noexcept { return global_ && !lockstep_; }
  // The epochs the training loop may run: a fast peer of a global budget may train past
  // its --epochs, up to the whole budget alone. A lockstep peer trains past them only to
  // wait for peers behind it, up to kLockstepLoops times its --epochs: one whose peers
  // behind it died never hears them end (a killed peer says no bye), and trained on to the
  // whole budget (local SGD, soak seed 85: 576 steps of 72).
  static constexpr int kLockstepLoops = 2;
  std::int64_t loop_epochs() const {
    if (!global_) return epochs_started(epochs_);
    return epochs_started(epochs_ * (lockstep_ ? kLockstepLoops : std::max(progress_->world(), 1)));
  }
  // The steps of the whole run, per peer (what the schedule decays over).
  std::int64_t planned_steps() const { return hearsay::planned_steps(epochs_, steps_per_epoch_); }

  // Called by the training thread before its first step.
  void started(Clock::time_point now) { started_ = now; }
  // Called by the training thread after each step: its own count goes out with its
  // messages, and the schedule's step and the end are worked out once here.
  void after_step(std::int64_t own_step, Clock::time_point now) {
    if (progress_) progress_->set_own(static_cast<std::uint64_t>(own_step));
    std::int64_t at = own_step;
    if (global_) {
      const double per_peer = progress_->total_steps(now) / std::max(progress_->world(), 1);
      if (!lockstep_) at = std::min<std::int64_t>(std::llround(per_peer), planned_steps());
      if (!ended_by_simulator_ && per_peer >= static_cast<double>(planned_steps())) end(End::global);
      if (lockstep_ && own_step >= planned_steps() && !ahead_of_the_others(own_step, now)) end(End::epochs);
    }
    schedule_step_.store(at);
    // --epochs with a fraction: the loop started a whole last epoch, and this ends it.
    if (!global_ && own_step >= planned_steps() && planned_steps() < loop_epochs() * steps_per_epoch_)
      end(End::epochs);
    if (time_.count() > 0 && now - started_ >= time_) end(End::time);
  }
  // Ends training after the current step (the simulator's `stop`; any thread).
  void end(End why) {
    End none = End::none;
    ended_.compare_exchange_strong(none, why);
  }
  bool ended() const { return ended_.load() != End::none; }
  End why() const { return ended_.load(); }
  // The step whose learning rate the schedule gives now (any thread).
  std::int64_t schedule_step(std::int64_t own_step) const {
    return schedule_follows_run() ? schedule_step_.load() : own_step;
  }

 private:
  // Whether this lockstep peer is well ahead of the peers it heard from: of their median
  // (a group a partition raced ahead is ahead of the rest, not of itself), by a twentieth of
  // the run, at least two steps (a neighbour's last count is a round old, and is
  // extrapolated). False when it heard from nobody.
  bool ahead_of_the_others(std::int64_t own_step, Clock::time_point now) const {
    const auto median = progress_->median_other(now);
    const double lead = std::max(2.0, 0.05 * static_cast<double>(planned_steps()));
    return median && static_cast<double>(own_step) - *median > lead;
  }

  const bool global_;
  const bool lockstep_;
  const Duration time_;
  const double epochs_;
  const std::int64_t steps_per_epoch_;
  const std::shared_ptr<transport::ProgressEstimate> progress_;
  const bool ended_by_simulator_;
  Clock::time_point started_{};
  std::atomic<std::int64_t> schedule_step_{0};
  std::atomic<End> ended_{End::none};
};

// The schedule of a peer under a RunBudget: `base` (over the run's planned steps) at the
// budget's step instead of the peer's own.
class BudgetedSchedule final : public LrSchedule {
 public:
  BudgetedSchedule(std::unique_ptr<LrSchedule> base, const RunBudget& budget)
      : base_(std::move(base)), budget_(budget) {}
  float at(std::int64_t step) const override { return base_->at(budget_.schedule_step(step)); }
  std::string describe() const override {
    return base_->describe() + (budget_.schedule_follows_run() ? " at the run's progress" : "");
  }

 private:
  std::unique_ptr<LrSchedule> base_;
  const RunBudget& budget_;
};

// How a peer, a process or a virtual one, sets up its run from its shard: one function, so
// that the two engines cannot drift apart.
// Steps in an epoch of `epoch_examples` (examples_per_epoch) in batches of `batch`, the
// last one short.
inline std::int64_t steps_per_epoch(std::int64_t epoch_examples, std::int64_t batch) {
  return (epoch_examples + batch - 1) / batch;
}

struct RunPlan {
  std::optional<EpochOrder> order;  // with ranks, equal epochs of the training set over the world
  std::int64_t steps_per_epoch = 0;
  std::shared_ptr<transport::ProgressEstimate> progress;  // null without ranks
  double shard_share = 1.0;  // AlgorithmOptions::shard_share (1: --average-over peers, or no ranks)
  std::unique_ptr<RunBudget> budget;
  std::unique_ptr<LrSchedule> schedule;  // over the planned steps, at *budget's step
};
// shard: this peer's examples (> 0); train_set: the whole training set's.
// ended_by_simulator: RunBudget's.
RunPlan plan_run(const PeerConfig& cfg, const std::string& id, std::int64_t shard, std::int64_t train_set,
                 bool ended_by_simulator);

inline const char* to_string(RunBudget::End end) {
  switch (end) {
    case RunBudget::End::none:
      return "none";
    case RunBudget::End::epochs:
      return "epochs";
    case RunBudget::End::global:
      return "global budget";
    case RunBudget::End::time:
      return "time budget";
    case RunBudget::End::told:
      return "told to stop";
  }
  return "?";
}

}  // namespace hearsay
