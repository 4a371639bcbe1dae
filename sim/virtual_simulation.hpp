// VirtualRun: one run of the virtual engine (virtual_run.hpp), read like the experiment:
// build the peers, start their fibers, let virtual time run (faults, evaluation points and
// progress happen in the peers' step hooks and at scheduled times), then evaluate the final
// parameters and say how the run ended. virtual_run.cpp has the run, virtual_run_end.cpp
// its end; only they include this.
#pragma once
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/fiber.hpp"
#include "base/rng.hpp"
#include "peer/run_output.hpp"
#include "sim/evaluation.hpp"
#include "sim/fault_log.hpp"
#include "sim/virtual_peer.hpp"
#include "sim/virtual_run.hpp"

namespace hearsay::sim {

using Duration = fiber::Scheduler::duration;
using WallClock = std::chrono::steady_clock;

class VirtualRun {
 public:
  VirtualRun(const SimConfig& cfg, const std::vector<Fault>& faults, const std::string& algo, int repeat,
             std::uint64_t seed, const TrainTest& data, const std::filesystem::path& dir,
             const std::function<void(const RunProgress&)>& progress, const std::function<bool()>& stop);
  RunResult run();

 private:
  Duration step_cost(int rank);
  void after_step(std::int64_t examples);
  void end_if_budget_spent();
  void peer_ended(int rank);
  void evaluate(bool final);
  void evaluate_snapshots();  // exact-step algorithms: each point once every running peer took it
  void fire_due_faults();
  void kill(std::size_t fault);
  void restart(std::size_t fault);  // kills the peer if alive; it comes back once gone
  double sent_per_peer() const;     // bytes, the mean over the run's peers, so far
  void freeze_or_thaw(std::size_t fault);
  void fill_or_free_disk(std::size_t fault);
  void stop_peers();                 // every peer killed: the run ends (timeout, interrupt, divergence)
  void thaw(int rank);               // its freeze ends (if frozen): it steps and talks again
  void hold_while_frozen(int rank);  // on the peer's fiber, after its step
  void start_again(int rank);        // a new peer from the old one's last checkpoint
  void tell_live_peers();            // oracle membership
  void apply_partitions();           // and links with a time: what the control files say
  void at_seconds(double s, std::function<void()> what);  // at `s` seconds of virtual time
  void show_progress();
  double elapsed_s() const { return seconds(scheduler_.now() - start_); }
  double run_epochs() const { return samples_ / static_cast<double>(data_.train.count); }
  void finish();

  const SimConfig& cfg_;
  const std::vector<Fault>& faults_;
  const std::string algo_;
  const TrainTest& data_;
  const std::function<void(const RunProgress&)>& progress_;
  const std::function<bool()>& stop_;
  fiber::Scheduler scheduler_;
  const fiber::Scheduler::time_point start_ = scheduler_.now();
  std::shared_ptr<transport::InprocFabric> fabric_ = transport::InprocFabric::create();
  std::vector<std::unique_ptr<VirtualPeer>> peers_;
  Evaluator evaluator_;
  FaultLog fault_log_;
  std::vector<bool> fault_done_;  // kill and restart faults handled (fired, or found moot)
  std::vector<std::vector<std::string>> blocked_;
  std::vector<std::optional<emulation::LinkSpec>> own_link_;  // by rank: a link fault with a time in force
  std::vector<bool> partitions_reached_;       // the partitions' start and end times come, as last applied
  std::vector<bool> frozen_, frozen_applied_;  // by rank: in a freeze now, and as last applied
  std::vector<std::optional<std::size_t>> freeze_of_;  // by rank: the freeze fault in force
  std::mutex freeze_mutex_;                            // only for the condition variable: one thread
  fiber::ConditionVariable thawed_;
  RunResult result_;
  VirtualPeerLinks links_;
  std::vector<std::vector<std::string>> args_;           // each rank's command line
  std::vector<std::unique_ptr<VirtualPeer>> retired_;    // restarted peers' old selves
  std::vector<std::optional<std::size_t>> restart_due_;  // by rank: a restart waiting for its end

  Duration base_step_{0};
  std::optional<StepTimeDist> dist_;
  std::vector<Rng> step_rng_;
  std::vector<int> eval_sample_;
  double samples_ = 0;
  double budget_samples_ = 0;       // those a global budget counts (budget_steps)
  std::int64_t planned_steps_ = 0;  // each peer's
  double eval_every_ = 1;
  double next_eval_ = 1;
  bool exact_steps_ = false;
  double training_ended_s_ = 0;
  std::int64_t next_point_ = 1;
  bool interrupted_ = false, timed_out_ = false, diverged_ = false;  // what stopped the run early
  bool budget_spent_ = false;  // every peer was told to end (end_if_budget_spent)
  WallClock::time_point wall_start_ = WallClock::now();
  WallClock::time_point last_progress_{};
};

}  // namespace hearsay::sim
