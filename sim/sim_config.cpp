#include "sim/sim_config.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "base/number_flag.hpp"
#include "gossip/mixing/algorithms/power_gossip.hpp"
#include "gossip/mixing/algorithms/registry.hpp"
#include "gossip/mixing/compress/compressor.hpp"
#include "gossip/network/emulation/link_spec.hpp"
#include "gossip/network/wire/header.hpp"
#include "model/device.hpp"
#include "model/zoo.hpp"
#include "peer/peer_config.hpp"
#include "sim/chaos.hpp"
#include "sim/virtual_run.hpp"

namespace hearsay::sim {

namespace {

// What runs: peers, algorithms, model, data and the recipe.
void add_run_options(CLI::App& cmd, SimConfig& cfg) {
  cmd.add_option("--peers", cfg.peers, "Peers per run (at most 256 processes; 4096 with --engine virtual)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd.add_option("--algo", cfg.algos, "Algorithms to run in turn, comma-separated: " + algorithms::algorithm_names())
      ->delimiter(',')
      ->capture_default_str();
  cmd.add_option("--graph", cfg.graph, "Graph of " + algorithms::algorithm_names(", ", true) + " (as hearsay peer --graph)")
      ->capture_default_str();
  // The peers' training flags, declared once with hearsay peer's (training_flags.hpp).
  add_training_flags(cmd, cfg.training, "Options", {.device = true, .threads = true, .init_seed = true});
}

// The faults: given, or drawn by --chaos.
void add_fault_options(CLI::App& cmd, SimConfig& cfg) {
  cmd.add_option(
      "--faults", cfg.faults,
      "Faults separated by ';' (T: 30s after training starts, or 1.5ep): kill:PEER@T, restart:PEER@T, "
      "slow:PEER:Fx, link:PEER:RATE,DELAY[,loss=P][,dup=P][,reorder=P], partition:A-B|C-D@T..T2, "
      "freeze:PEER@T..T2 (SIGSTOP, "
      "then SIGCONT)");
  cmd.add_option("--chaos", cfg.chaos,
                 "Draw the faults at random instead of --faults: SEED[:RATE], about RATE overlapping faults "
                 "per epoch (default 2) of every kind, the same for every algorithm; the schedule is "
                 "printed and stored, and the same seed draws it again")
      ->type_name("SEED[:RATE]");
}

// The conditions of the run (links, pacing) and what comes out of it.
void add_condition_and_output_options(CLI::App& cmd, SimConfig& cfg) {
  cmd.add_option(
      "--link", cfg.link,
      "Every peer's link, RATE,DELAY[,loss=P][,dup=P][,reorder=P], e.g. 1gbit,1ms (default: none)");
  cmd.add_option("--step-time", cfg.step_time,
                 "Emulate peers on machines of their own: every step's computation takes at least this long "
                 "(e.g. 60ms), a slow:PEER:Fx peer's F times as long. Without it, N peers share this box's "
                 "cores, and a slow peer that waits frees them for the others")
      ->check(CLI::Validator(
          [](const std::string& text) -> std::string {
            try {
              if (parse_duration(text, "--step-time") > std::chrono::seconds(60))
                return "--step-time '" + text +
                       "' is longer than a minute: give a step's computation time, "
                       "e.g. 60ms";
            } catch (const std::invalid_argument& e) {
              return e.what();
            }
            return {};
          },
          "DURATION"));
  cmd.add_option("--target-acc", cfg.target_acc, "Report the wall time to this averaged-model accuracy")
      ->check(CLI::Range(0.0, 1.0));
  cmd.add_option("--repeat", cfg.repeat, "Runs per algorithm, with seeds --seed, --seed + 1, ...")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd.add_option("--eval-every", cfg.eval_every,
                 "Epochs of the whole run (samples of all peers / training set) between evaluations "
                 "(default: --epochs / 8, at most 1: at least 8 points a run)")
      ->check(CLI::Range(0.01, 1000.0));
  cmd.add_option("--out", cfg.out,
                 "Output directory: summary.json, curves.csv, report.md, plots, peer logs (required, here or "
                 "in the --config file)");
  cmd.add_option("--http", cfg.http_port,
                 "process: rank r serves Prometheus /metrics and /status at 127.0.0.1:PORT+r, and "
                 "OUT/prometheus-targets.json lists them for the run under way (Prometheus file_sd; "
                 "hearsay watch reads it)")
      ->check(CLI::Range(1, 65535));
  cmd.add_option("--budget", cfg.budget,
                 "What ends a run: global (the peers together train --epochs epochs of the training set, "
                 "fast peers taking more steps than slow ones; every peer stops then) or per-peer (each "
                 "peer trains --epochs epochs; the run lasts as long as its slowest peer)")
      ->check(CLI::IsMember({"global", "per-peer"}))
      ->capture_default_str();
  add_duration(cmd, "--time-budget", cfg.time_budget,
               "Training time after which every peer stops, checkpoints and says bye (90s, 10m, or "
               "seconds; virtual time with --engine virtual; 0: none), as hearsay peer --time-budget");
  cmd.add_option("--run-timeout", cfg.run_timeout_s,
                 "Seconds of real time after which a run is stopped (status: timeout); 0: never")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd.add_flag("--overwrite", cfg.overwrite,
               "Replace the results of an earlier sweep in --out (its reports and run folders); without it "
               "such a directory is refused, so that two sweeps never mix");
  // A plain flag, not "!--progress" negated: CLI11's help showed that as --no-progress{false}.
  cmd.add_flag("--no-progress", cfg.no_progress, "No live progress line");
  cmd.add_option("--device", cfg.device,
                 "Where peers train: auto (the GPUs of --devices when there are any, else the CPU) | cpu | "
                 "cuda | cuda:N (every peer on GPU N)")
      ->capture_default_str();
  cmd.add_option("--devices", cfg.devices, "GPUs to spread the peers over, rank by rank, e.g. 0,1")
      ->delimiter(',')
      ->check(CLI::Range(0, 1023))
      ->capture_default_str();
}

// How the peers mix: what sgp and dpsgd overlap, what goes on the wire, BatchNorm's statistics.
void add_mixing_options(CLI::App& cmd, SimConfig& cfg) {
  cmd.add_flag("--overlap", cfg.overlap,
               "sgp and dpsgd peers run each round while their next steps train (hearsay peer --overlap): "
               "sgp then waits for no neighbour, and is evaluated live rather than at exact steps "
               "(allreduce stays synchronous)");
  cmd.add_option("--compress", cfg.compress,
                 "What the peers send (hearsay peer --compress): the values as f32, f16, bf16 or int8, "
                 "dpsgd's and gossip's compressed differences (CHOCO-SGD): topk:P%, randk:P%, sign, int4, "
                 "dpsgd's rank-R "
                 "projections (PowerGossip, undirected graphs): powergossip:R, or allreduce's rank-R updates "
                 "(PowerSGD): powersgd:R; one for every --algo, or one each, as in "
                 "dpsgd=topk:1%,allreduce=powersgd:2 (the others send f32)")
      ->capture_default_str();
  cmd.add_option(
         "--consensus-step", cfg.consensus_step,
         "dpsgd's and gossip's consensus step size in (0, 1] with --compress topk/randk/sign/int4 (CHOCO) or "
         "powergossip:R (default: the compressor's; 1 for powergossip)")
      ->check(CLI::Range(0.0, 1.0));
  cmd.add_flag("--no-lookahead", cfg.no_lookahead,
               "dpsgd with --compress topk/randk/sign/int4 (CHOCO): the peers train at their CHOCO iterate, "
               "as the paper, not a look-ahead over their neighbours' copies from it (hearsay peer "
               "--no-lookahead)");
  cmd.add_option("--momentum-kind", cfg.momentum_kind,
                 "What --momentum runs over (hearsay peer --momentum-kind): local (each peer's gradients) or "
                 "quasi-global (the model's change across rounds, mixing included; not for powersgd:R)")
      ->check(CLI::IsMember({"local", "quasi-global"}))
      ->capture_default_str();
  cmd.add_option(
         "--average-over", cfg.average_over,
         "With --partition's unequal shards (hearsay peer --average-over): examples (each peer's steps "
         "scaled by its shard over the mean shard, so that every example weighs alike, as all-reduce "
         "over one large batch) or peers (every peer's loss alike)")
      ->check(CLI::IsMember({"examples", "peers"}))
      ->capture_default_str();
  cmd.add_option(
         "--bn-stats", cfg.bn_stats,
         "BatchNorm's running statistics (resnet20): mix them with the parameters, or keep them local to "
         "each peer (the averaged model averages them either way)")
      ->check(CLI::IsMember({"mix", "local"}))
      ->capture_default_str();
}

// What each peer process runs.
void add_peer_program_options(CLI::App& cmd, SimConfig& cfg) {
  cmd.add_option("--binary", cfg.binary, "The hearsay executable of the peers (default: this one)");
  cmd.add_option("--peer-arg", cfg.peer_args,
                 "An argument passed to every peer as it is (repeat it, e.g. --peer-arg=--dead-after "
                 "--peer-arg=5s)");
  cmd.add_option("--peer-command", cfg.peer_command,
                 "process: run each peer as this command with `hearsay peer`'s flags after it, instead of "
                 "hearsay peer: a PyTorch script of the hearsay module, e.g. \"python3 "
                 "examples/torch/lenet_fmnist.py\" (docs/GUIDE.md, \"A PyTorch script as a peer\")");
}

// How the peers run: processes, or all of them in this process in virtual time.
void add_engine_options(CLI::App& cmd, SimConfig& cfg) {
  cmd.add_option(
         "--engine", cfg.engine,
         "process: a `hearsay peer` process per peer, in real time; virtual: every peer in this process "
         "on fibers, in virtual time (a thousand peers on one box; time is each step's modelled cost "
         "and each message's latency plus size over bandwidth; times are virtual seconds)")
      ->check(CLI::IsMember({"process", "virtual"}))
      ->capture_default_str();
  cmd.add_option(
      "--step-time-dist", cfg.step_time_dist,
      "virtual: draw each step's time, lognormal:MEDIAN,SIGMA (e.g. lognormal:60ms,0.5: stragglers); "
      "without it and --step-time, this machine's measured step time");
  cmd.add_option(
         "--eval-peers", cfg.eval_peers,
         "Peers whose own accuracy is evaluated at each point, a seeded sample (default: all up to 32 "
         "peers, else 16); the averaged model and consensus distance always cover every peer")
      ->check(CLI::Range(1, 100000));
  cmd.add_flag(
      "--distinct-init", cfg.distinct_init,
      "Each peer starts from its own initialisation (peers' --init-seed), not --seed's: with --lr 0 the "
      "consensus distance then shows how fast the graph mixes");
  cmd.add_option("--threads", cfg.threads,
                 "virtual: threads that compute the peers' steps (default: every core this process may use); "
                 "the results do not depend on it")
      ->check(CLI::Range(1, 1024));
}

}  // namespace

// The flags of `hearsay sim`, in the order --help lists them.
void add_sim_options(CLI::App& cmd, SimConfig& cfg) {
  add_run_options(cmd, cfg);
  add_fault_options(cmd, cfg);
  add_condition_and_output_options(cmd, cfg);
  add_mixing_options(cmd, cfg);
  add_peer_program_options(cmd, cfg);
  add_engine_options(cmd, cfg);
}

std::string resolve_peer_devices(SimConfig& cfg) {
  const DeviceRequest request = parse_device(cfg.device);
  cfg.peer_device.assign(1, "cpu");
  const DeviceChoice choice = choose_device(request, 0);
  if (!choice.device.is_cuda()) return "peers on the CPU (" + choice.reason + ")";
  if (request.index >= 0) {
    cfg.peer_device.assign(1, choice.device.str());
    return "peers on " + choice.device.str();
  }
  std::string why_none;
  const int count = cuda_device_count(why_none);
  cfg.peer_device.clear();
  std::string line = "peers on";
  for (const int d : cfg.devices) {
    if (d >= count)
      throw DeviceUnavailable("--devices: no CUDA device " + std::to_string(d) + ": this machine has " +
                              std::to_string(count) + " (0 to " + std::to_string(count - 1) + ")");
    cfg.peer_device.push_back("cuda:" + std::to_string(d));
    line += (cfg.peer_device.size() == 1 ? " " : ", ") + cfg.peer_device.back();
  }
  return line + (request.kind == DeviceRequest::Kind::automatic ? " (auto)" : "");
}

double eval_interval(const SimConfig& cfg) {
  return cfg.eval_every > 0 ? cfg.eval_every : std::min(1.0, cfg.training.epochs / 8.0);
}

namespace {
// What the virtual engine cannot do (yet), said before anything runs.
void check_virtual_engine(const SimConfig& cfg) {
  if (parse_device(cfg.device).kind == DeviceRequest::Kind::cuda)
    throw std::invalid_argument(
        "--engine virtual trains on the CPU: leave --device out, or use --engine process");
  if (!cfg.step_time_dist.empty()) (void)parse_step_time_dist(cfg.step_time_dist);
  if (!cfg.step_time.empty() && !cfg.step_time_dist.empty())
    throw std::invalid_argument("--step-time and --step-time-dist both set a step's time: give one of them");
}
}  // namespace

int eval_peer_count(const SimConfig& cfg) {
  return cfg.eval_peers > 0 ? std::min(cfg.eval_peers, cfg.peers) : cfg.peers <= 32 ? cfg.peers : 16;
}

namespace {
// --http gives each rank a port of its own; --peer-arg --http would give them all one.
void check_http_port(const SimConfig& cfg) {
  for (const auto& a : cfg.peer_args)
    if (a == "--http" || a.starts_with("--http="))
      throw std::invalid_argument(
          "--peer-arg " + a +
          ": every peer would take the same port; give hearsay sim --http PORT (rank r "
          "serves at PORT+r)");
  if (cfg.http_port == 0) return;
  if (cfg.engine != "process")
    throw std::invalid_argument("--http is for --engine process: virtual peers serve no endpoints");
  if (cfg.http_port + cfg.peers - 1 > 65535)
    throw std::invalid_argument("--http " + std::to_string(cfg.http_port) + " with " +
                                std::to_string(cfg.peers) + " peers needs ports up to " +
                                std::to_string(cfg.http_port + cfg.peers - 1) + ": give a port at most " +
                                std::to_string(65536 - cfg.peers));
}
}  // namespace

void draw_chaos(SimConfig& cfg) {
  if (cfg.chaos.empty()) return;
  if (!cfg.faults.empty())
    throw std::invalid_argument("--chaos draws the faults: give --faults or --chaos, not both");
  cfg.faults = chaos_faults(parse_chaos(cfg.chaos), cfg.peers, cfg.training.epochs);
}

namespace {

// --compress ALGO=SPEC,...: the pairs, in order; empty for one spec given for all.
std::vector<std::pair<std::string, std::string>> per_algorithm(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  if (text.find('=') == std::string::npos) return out;
  std::size_t at = 0;
  for (;;) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
      throw std::invalid_argument("--compress '" + text + "': '" + item +
                                  "' is not ALGO=SPEC (as in dpsgd=topk:1%,allreduce=powersgd:2)");
    out.emplace_back(item.substr(0, eq), item.substr(eq + 1));
    if (comma == text.size()) return out;
    at = comma + 1;
  }
}

// PowerGossip's graph, as far as the name says (a file's direction is checked by its peers).
void check_power_gossip_graph(const std::string& graph) {
  topology::GraphSpec spec;
  try {
    spec.kind = topology::parse_graph_kind(graph);
  } catch (const std::exception&) {
    return;  // not a graph name: said elsewhere
  }
  if (auto why = algorithms::power_gossip_graph_refusal(spec)) throw std::invalid_argument(*why);
}

// --compress: a value dtype, or a compression that every --algo takes; or one per --algo.
void check_compress(const SimConfig& cfg) {
  const auto pairs = per_algorithm(cfg.compress);
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const auto& [algo, spec] = pairs[i];
    if (std::ranges::find(cfg.algos, algo) == cfg.algos.end())
      throw std::invalid_argument("--compress " + algo + "=" + spec + ": " + algo + " is not in --algo");
    for (std::size_t j = 0; j < i; ++j)
      if (pairs[j].first == algo) throw std::invalid_argument("--compress names " + algo + " twice");
  }
  bool differences = false;
  bool choco_dpsgd = false;
  for (const auto& a : cfg.algos) {
    const std::string spec = compress_for(cfg, a);
    choco_dpsgd = choco_dpsgd || algorithms::runs_lookahead(a, spec);
    if (!wire::parse_value_dtype(spec))
      if (const auto why = compress::check_compressor_spec(spec)) throw std::invalid_argument(*why);
    differences = differences || compress::is_difference_compressor(spec) || compress::power_gossip(spec);
    if (compress::power_gossip(spec)) check_power_gossip_graph(cfg.graph);
    const auto* traits = algorithms::find_algorithm(a);
    if (traits == nullptr) continue;  // an unknown --algo is said elsewhere
    if (const auto why = algorithms::compress_refusal(*traits, spec))
      throw std::invalid_argument(*why + (pairs.empty() ? " (give each algorithm its own: --compress "
                                                          "dpsgd=topk:1%,allreduce=powersgd:2)"
                                                        : ""));
  }
  if (cfg.consensus_step > 0 && !differences)
    throw std::invalid_argument(
        "--consensus-step is for compressed differences (dpsgd and gossip: --compress topk:P%, randk:P%, "
        "sign, "
        "int4; dpsgd: powergossip:R); "
        "--compress " +
        cfg.compress + " has none");
  if (cfg.no_lookahead && !choco_dpsgd)
    throw std::invalid_argument(
        "--no-lookahead is for dpsgd's compressed differences (CHOCO: --algo dpsgd --compress topk:P%, "
        "randk:P%, sign, int4); no --algo here runs them");
}

}  // namespace

std::string compress_for(const SimConfig& cfg, std::string_view algo) {
  const auto pairs = per_algorithm(cfg.compress);
  if (pairs.empty()) return cfg.compress;
  for (const auto& [a, spec] : pairs)
    if (a == algo) return spec;
  return "f32";
}

std::vector<Fault> validate(const SimConfig& cfg) {
  if (cfg.engine == "process" && cfg.peers > 256)
    throw std::invalid_argument("--peers " + std::to_string(cfg.peers) +
                                ": at most 256 peer processes on one box; --engine virtual runs up to 4096");
  if (cfg.engine == "process" && !cfg.step_time_dist.empty())
    throw std::invalid_argument(
        "--step-time-dist is for --engine virtual; the process engine takes --step-time");
  if (cfg.out.empty()) throw std::invalid_argument("--out DIR is required: where the results go");
  check_http_port(cfg);
  if (!cfg.peer_command.empty() && cfg.engine != "process")
    throw std::invalid_argument("--peer-command is for --engine process: a virtual peer is hearsay's own");
  if (!cfg.peer_command.empty() && cfg.peer_command.find_first_not_of(" \t") == std::string::npos)
    throw std::invalid_argument("--peer-command: the command is empty");
  if (cfg.algos.empty()) throw std::invalid_argument("--algo: give at least one algorithm");
  for (const auto& a : cfg.algos)
    if (algorithms::find_algorithm(a) == nullptr)
      throw std::invalid_argument("--algo '" + a + "' is not one of " + algorithms::algorithm_names());
  check_compress(cfg);
  for (const auto& a : cfg.algos)
    if (const auto why = momentum_kind_refusal(cfg.momentum_kind, cfg.training, compress_for(cfg, a), true))
      throw std::invalid_argument(*why);
  const auto models = model_names();
  if (std::find(models.begin(), models.end(), cfg.training.model) == models.end()) {
    std::string known;
    for (const auto& m : models) known += (known.empty() ? "" : ", ") + m;
    throw std::invalid_argument("--model '" + cfg.training.model + "' is not a model of the zoo (" + known +
                                ")");
  }
  // The flag reads a float: 1e40 passes its check and reaches the peers as inf.
  if (!std::isfinite(cfg.training.lr) || !(cfg.training.lr >= 0))
    throw std::invalid_argument("--lr is " + std::to_string(cfg.training.lr) +
                                " as a 32-bit float: give a learning rate from 0 to 3.4e38, e.g. --lr 0.1");
  parse_device(cfg.device);  // the text; whether the machine has it: resolve_peer_devices
  if (cfg.devices.empty()) throw std::invalid_argument("--devices: give at least one GPU index, e.g. 0");
  if (!cfg.link.empty()) {
    try {
      (void)emulation::parse_link_spec(cfg.link);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("--link: ") + e.what());
    }
  }
  std::vector<Fault> faults;
  try {
    faults = parse_faults(cfg.faults);
    check_faults(faults, cfg.peers);
    // A time in epochs is known to fall within the run or not before anything starts (one
    // in seconds is not: not_fired() in the run's status tells).
    for (const auto& f : faults)
      if (f.at.unit == FaultTime::Unit::epochs && f.at.value >= cfg.training.epochs)
        throw std::invalid_argument("fault '" + f.text + "' is due at " + to_string(f.at) +
                                    ", but the run trains " + exact_flag_number(cfg.training.epochs) +
                                    (cfg.training.epochs == 1 ? " epoch" : " epochs") +
                                    " (--epochs): it would never fire; give a time before the end");
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--faults: ") + e.what());
  }
  if (cfg.engine == "virtual") check_virtual_engine(cfg);
  return faults;
}

namespace {

namespace fs = std::filesystem;

// What a sweep writes in its --out directory: the reports, plots, and folders of runs
// (ALGO-R, with peer logs) or of experiments (with a summary.json of their own).
bool is_sweep_output(const fs::directory_entry& entry) {
  std::error_code ec;
  const std::string name = entry.path().filename().string();
  if (entry.is_directory(ec))
    return fs::exists(entry.path() / "summary.json", ec) || fs::exists(entry.path() / "peer0.log", ec);
  return name == "summary.json" || name == "curves.csv" || name == "report.md" ||
         entry.path().extension() == ".png";
}

}  // namespace

void prepare_out_dir(const SimConfig& cfg) {
  const fs::path dir = cfg.out;
  const std::string where = "--out '" + cfg.out + "': ";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw std::invalid_argument(where + "cannot create it (" + ec.message() +
                                "); give a directory you can write");
  if (!fs::is_directory(dir, ec)) throw std::invalid_argument(where + "is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw std::invalid_argument(where + "cannot write there (" + std::strerror(errno) +
                                "); give a directory you can write");
  std::vector<fs::path> earlier;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (is_sweep_output(entry)) earlier.push_back(entry.path());
  if (ec) throw std::invalid_argument(where + "cannot list it (" + ec.message() + ")");
  const bool has_sweep = std::any_of(earlier.begin(), earlier.end(), [](const fs::path& p) {
    std::error_code e;
    return p.filename() == "summary.json" || fs::exists(p / "summary.json", e);
  });
  if (!has_sweep) return;
  if (!cfg.overwrite)
    throw std::invalid_argument(where +
                                "holds the results of an earlier sweep (summary.json); give another "
                                "directory, or --overwrite to replace them");
  for (const auto& p : earlier) {
    fs::remove_all(p, ec);
    if (ec)
      throw std::invalid_argument(where + "cannot remove the earlier " + p.string() + " (" + ec.message() +
                                  ")");
  }
}

}  // namespace hearsay::sim
