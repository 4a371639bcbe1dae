// One simulated run: N peer processes of one algorithm, started, watched, faulted,
// evaluated and stopped. run_simulation runs a SimulationRun (sim/simulation_run.hpp),
// whose loop reads like the experiment: start the peers; until they are done, apply the
// faults that are due, collect the live peers' parameters at every evaluation point and
// show progress; then evaluate the final parameters (each peer's last checkpoint) and say
// how the run ended.
#pragma once
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model/data/dataset.hpp"
#include "sim/evaluation.hpp"
#include "sim/fault_log.hpp"
#include "sim/fault_spec.hpp"
#include "sim/invariants.hpp"
#include "sim/sim_config.hpp"

namespace hearsay::sim {

struct RunResult {
  std::string algo;
  std::string topology;  // the graph, or "random" (gossip), "ring" (allreduce)
  std::string compress = "f32";  // the peers' --compress
  bool no_lookahead = false;     // CHOCO dpsgd peers run without the look-ahead (--no-lookahead)
  // "dpsgd (exp, topk:1%)": the algorithm, with its graph unless that is what the algorithm
  // always uses, and what it sends unless that is f32; how the report and the plots name it.
  std::string label() const {
    std::string parts = topology == "random" || topology == "ring" ? "" : topology;
    if (compress != "f32") parts += (parts.empty() ? "" : ", ") + compress;
    if (no_lookahead) parts += ", no look-ahead";
    return parts.empty() ? algo : algo + " (" + parts + ")";
  }
  int peers = 0;
  double epochs = 0;
  int repeat = 0;
  std::uint64_t seed = 0;
  std::string faults;                      // the spec, as given
  std::vector<FaultFiring> fault_firings;  // each fault: whether and when it fired
  std::string link;
  double startup_s = 0;  // from the first peer's start until the last one listened
  double wall_s = 0;     // from then (training starts) until every peer ended
  double samples_per_s = 0;
  double bytes_sent_per_peer = 0;
  std::vector<Evaluation> curve;  // in time order; the last one is the final evaluation
  std::optional<double> time_to_target_s;
  std::optional<double> bytes_to_target_per_peer;  // sent by each peer (the mean) by then
  std::optional<double> target_acc;
  long peak_rss_kb_max = 0;  // the largest peer
  std::vector<long> peak_rss_kb;
  // "ok"; "ok (F never fired: ...)" when a fault did not fire; "diverged: ...", "failed: ..."
  // (naming the peer), "timeout ...", "interrupted".
  std::string status;
  std::filesystem::path dir;
  // "process" or "virtual". In virtual time, time_s, wall_s and time_to_target_s are virtual
  // seconds; real_s is what the run took on this machine.
  std::string engine = "process";
  double real_s = 0;
  std::string budget = "global";  // what ended it: SimConfig::budget
  // Each rank's shard of the training set and the steps it took (-1: not known).
  std::vector<std::int64_t> shard_examples, peer_steps;
  // Virtual engine: when each rank's training ended (-1: killed or not ended); empty with processes.
  std::vector<double> peer_end_s;
  std::vector<double> peer_final_lr;  // virtual engine: each rank's learning rate at its end
  // What rank 0 trained with, from its "start" record (peer/metrics.hpp: settings_record);
  // null when it never started.
  nlohmann::json peer_settings;
  // Against the sweep's all-reduce run of the same repeat (filled once the sweep has it;
  // null when there is none or it failed): the time this run first came within 0.5 point
  // of all-reduce's final accuracy, and its accuracy when all-reduce ended.
  std::optional<double> time_to_reference_s, acc_at_reference_end;
  // Peers that finished but whose checkpoint is missing or does not load, and checkpoint
  // files the run's watch found on disk not whole (process engine; checkpoint_watch.hpp).
  std::vector<std::string> checkpoint_problems;
  std::uint64_t checkpoint_versions_read = 0;  // by the watch, while the run went
  // Push-sum (sgp) in the virtual engine: the network's weight at the end, counted as
  // push_sum_ledger.hpp says; none otherwise.
  std::optional<double> push_sum_weight;
  // With faults: every invariant (invariants.hpp), held or not; empty without faults.
  std::vector<InvariantCheck> invariants;

  // The last evaluation (of the final parameters when any peer finished), or null when
  // nothing could be evaluated (every peer failed before the first evaluation point).
  const Evaluation* final_evaluation() const { return curve.empty() ? nullptr : &curve.back(); }
};

// What the live display gets, about twice a second.
struct RunProgress {
  const std::string* algo = nullptr;
  double time_s = 0;
  double run_epochs = 0;
  double epochs = 0;
  int running = 0;
  double samples_per_s = 0;
  std::optional<double> last_acc;
};

// A run's record before it runs: what it is (algorithm, topology, peers, the settings),
// for both engines.
RunResult planned_run(const SimConfig& cfg, const std::string& algo, int repeat, std::uint64_t seed,
                      const std::filesystem::path& dir);
// The time of the first evaluation whose averaged model reached `target`; none when none did
// or there is no target.
std::optional<double> time_to_target(const std::vector<Evaluation>& curve, std::optional<double> target);
// The bytes per peer sent by then; none also when that evaluation does not know them.
std::optional<double> bytes_to_target(const std::vector<Evaluation>& curve, std::optional<double> target);
// How far below all-reduce's final accuracy a run may be and still count as reaching it.
inline constexpr double kReferenceMargin = 0.005;
// The all-reduce run of `repeat` that ended ok with an evaluation, which the others are
// compared with; null when the sweep has none.
const RunResult* allreduce_reference(const std::vector<RunResult>& runs, int repeat);
// Fills every run's time_to_reference_s and acc_at_reference_end against the all-reduce
// run of its repeat (runs of a repeat without one get nulls).
void compare_with_allreduce(std::vector<RunResult>& runs);
// Whether a run's budget is spent, in both engines: a global budget once the peers
// together trained --epochs epochs (but all-reduce's budget is each peer's own: every peer
// must take the same steps), a time budget once that long has passed.
bool budget_spent(const SimConfig& cfg, const std::string& algo, double run_epochs, double elapsed_s);
// The steps every peer of a run plans: --epochs of the steps per epoch all ranked peers
// share (the training set over the peers, in batches; RunPlan).
std::int64_t planned_peer_steps(const SimConfig& cfg, std::int64_t train_count);
// The steps of a peer that took `steps` that a global budget counts, in both engines. A
// lockstep algorithm's peers end at their planned steps, so the steps one trains on past
// them (well ahead of the others, RunBudget) do not count: counted, they ended the peers
// behind it before their planned steps (soak seed 46, local SGD: a peer whose slow uplink
// let it run ahead took 190 steps, the others were stopped at 53 to 62 of 72).
std::int64_t budget_steps(bool lockstep, std::int64_t steps, std::int64_t planned);

// Runs `algo` once (repeat `repeat`, seed `seed`) in `dir`. `stop` is polled: when it
// returns true the peers are stopped and the run ends with status "interrupted".
RunResult run_simulation(const SimConfig& cfg, const std::vector<Fault>& faults, const std::string& algo,
                         int repeat, std::uint64_t seed, const TrainTest& data,
                         const std::filesystem::path& dir,
                         const std::function<void(const RunProgress&)>& progress,
                         const std::function<bool()>& stop);

}  // namespace hearsay::sim
