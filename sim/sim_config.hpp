// The settings of `hearsay sim`: which algorithms to compare, on how many peers, with
// which model, data, faults and links, and where the results go.
#pragma once
#include <CLI/CLI.hpp>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "peer/duration_flag.hpp"
#include "peer/training_flags.hpp"
#include "sim/fault_spec.hpp"

namespace hearsay::sim {

// The simulator's defaults of the peers' training flags: 3 epochs of batch 32 at lr 0.1,
// seed 1.
inline TrainingSettings sim_training_defaults() {
  TrainingSettings t;
  t.epochs = 3;
  t.batch = 32;
  t.lr = 0.1f;
  t.seed = 1;
  return t;
}

struct SimConfig {
  int peers = 8;
  std::vector<std::string> algos{"gossip", "dpsgd", "allreduce"};
  std::string graph = "exp";  // of the graph algorithms (dpsgd, sgp, adpsgd, local)
  // Every peer's training settings: hearsay peer's flags (peer/training_flags.hpp, less
  // --device, --threads and --init-seed, which the simulator sets per peer). training.seed
  // is the first repeat's; batch is per peer; epochs may be a fraction.
  TrainingSettings training = sim_training_defaults();
  std::string faults;     // the fault SPEC (fault_spec.hpp); drawn by draw_chaos with --chaos
  std::string chaos;      // SEED[:RATE] (chaos.hpp); empty: the faults are --faults
  std::string link;       // every peer's link, e.g. "1gbit,1ms"; empty: not emulated
  std::string step_time;  // every peer's least step time, e.g. "60ms"; empty: none
  // How peers run: "process" (a `hearsay peer` process each) or "virtual" (all in this
  // process, in virtual time: sim/virtual_run.hpp).
  std::string engine = "process";
  std::string step_time_dist;        // virtual: each step's time drawn, "lognormal:MEDIAN,SIGMA"; empty: none
  int eval_peers = 0;                // peers whose own accuracy is evaluated; 0: all up to 32, else 16
  bool distinct_init = false;        // each peer starts from its own initialisation (--init-seed)
  int threads = 0;                   // virtual: compute threads; 0: every core this process may use
  bool overlap = false;              // sgp's and dpsgd's --overlap: rounds run while the next steps train
  std::string bn_stats = "mix";      // the peers' --bn-stats: mix | local
  std::string momentum_kind = "local";  // the peers' --momentum-kind: local | quasi-global
  std::string average_over = "examples";  // the peers' --average-over: examples | peers
  // The peers' --compress: f32, f16, bf16, int8 (values), topk:P%, randk:P%, sign, int4
  // (CHOCO's compressed differences, for dpsgd), powergossip:R (dpsgd), powersgd:R
  // (allreduce); one spec for every
  // algorithm, or ALGO=SPEC,... per algorithm (compress_for). And CHOCO's
  // --consensus-step (0: default).
  std::string compress = "f32";
  double consensus_step = 0;
  bool no_lookahead = false;         // the CHOCO dpsgd peers' --no-lookahead
  std::optional<double> target_acc;  // time to this averaged-model accuracy
  int repeat = 1;                    // runs per algorithm (seed, seed + 1, ...)
  double eval_every = 0;             // epochs of the whole run between evaluations; 0: eval_interval()
  std::string out;                   // output directory (required)
  std::string binary;                // the hearsay executable the peers run; empty: this one
  std::vector<std::string> peer_args;  // passed to every peer as they are
  // process: each peer is this command (run by /bin/sh, `hearsay peer`'s flags after it)
  // instead of `hearsay peer`: a Python script of the hearsay module (python/). Empty: none.
  std::string peer_command;
  // process: rank r serves /metrics and /status at 127.0.0.1:http_port + r (hearsay peer
  // --http), listed in OUT/prometheus-targets.json for the run under way; 0: none.
  int http_port = 0;
  double run_timeout_s = 3600;  // a run still going after this is stopped: status "timeout"; 0: never
  // What ends a run (peer/run_budget.hpp): "global" (the peers together train --epochs
  // epochs of the training set; fast peers take more steps) or "per-peer" (each peer trains
  // --epochs, the run ends with the slowest).
  std::string budget = "global";
  Duration time_budget{0};      // every peer stops this long after training began (0: none)
  double time_budget_s() const { return std::chrono::duration<double>(time_budget).count(); }
  bool no_progress = false;     // no live progress line (shown on a terminal otherwise)
  bool overwrite = false;       // replace an earlier sweep's results in `out`
  std::string config_file;      // --config: a TOML experiment file (experiment_file.hpp)
  std::string device = "auto";  // where peers train: auto | cpu | cuda | cuda:N
  std::vector<int> devices{0};  // the GPUs that auto/cuda spread peers over, rank by rank
  // Filled by resolve_peer_devices: peer r trains on peer_device[r % size] ("cpu", "cuda:1").
  std::vector<std::string> peer_device;
};

// Registers the flags of `hearsay sim` on cmd, bound to cfg.
void add_sim_options(CLI::App& cmd, SimConfig& cfg);

// --chaos SEED[:RATE]: fills cfg.faults with the schedule it draws (chaos.hpp). Nothing
// without --chaos; std::invalid_argument for a bad spec, or with --faults too.
void draw_chaos(SimConfig& cfg);

// Checks what the flags cannot check one by one; throws std::invalid_argument saying what
// to change. Returns the parsed faults.
std::vector<Fault> validate(const SimConfig& cfg);

// What `algo`'s peers send: the spec --compress gives it (ALGO=SPEC,...: f32 for an
// algorithm it does not name), or the one spec given for all.
std::string compress_for(const SimConfig& cfg, std::string_view algo);

// Where each peer trains, on this machine: fills cfg.peer_device and returns one line for
// the log ("peers on cuda:0, cuda:1", "peers on the CPU (auto: no CUDA device)").
// DeviceUnavailable (model/device.hpp) when --device or --devices names a GPU that is not
// there, or this build has no CUDA.
std::string resolve_peer_devices(SimConfig& cfg);

// Peers whose own accuracy each evaluation point measures: --eval-peers, else all of them
// up to 32 peers and 16 beyond.
int eval_peer_count(const SimConfig& cfg);

// Epochs between evaluation points: --eval-every, or by default epochs / 8 and at most 1,
// so that every run has at least 8 points on its curves (a 1-epoch run had one).
double eval_interval(const SimConfig& cfg);

// Makes cfg.out ready for a sweep before anything runs: created if missing; refused when it
// cannot be created or written, and when it holds an earlier sweep's results (a
// summary.json there or in a folder of it) unless cfg.overwrite, which removes them (the
// reports, plots and run folders). std::invalid_argument in one line naming the directory.
void prepare_out_dir(const SimConfig& cfg);

}  // namespace hearsay::sim
