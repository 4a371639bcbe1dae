#include "sim/sim_command.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <map>
#include <set>

#include "base/stop_signals.hpp"
#include "model/data/dataset.hpp"
#include "sim/experiment_file.hpp"
#include "sim/plots.hpp"
#include "sim/report.hpp"
#include "sim/sim_run.hpp"
#include "sim/virtual_run.hpp"

namespace hearsay::sim {
namespace {

std::atomic<bool> g_interrupted{false};
extern "C" void on_sim_interrupt(int) { g_interrupted.store(true); }

// Where stderr is not a terminal (a log file, a Slurm job's output) the progress line is
// written as a line of its own every 10 s of real time, and at each run's start: the
// virtual engine's clock may cover a 10-minute run in a fraction of a virtual second, so
// the run's own clock cannot pace a log.
struct ProgressLog {
  int run = 0;
  std::chrono::steady_clock::time_point last{};
};

void show_progress(const RunProgress& p, const std::string& name, int index, int total, bool tty,
                   ProgressLog& log) {
  char line[256];
  std::snprintf(line, sizeof line, "[%d/%d %s] %5.1f s  epoch %.2f/%g  %d running  %.0f samples/s  acc %s",
                index, total, name.c_str(), p.time_s, p.run_epochs, p.epochs, p.running, p.samples_per_s,
                p.last_acc ? std::to_string(*p.last_acc).substr(0, 6).c_str() : "-");
  if (tty) {
    std::fprintf(stderr, "\r\033[K%s", line);
  } else {
    const auto now = std::chrono::steady_clock::now();
    if (log.run == index && now - log.last < std::chrono::seconds(10)) return;
    log.run = index;
    log.last = now;
    std::fprintf(stderr, "%s\n", line);
  }
}

}  // namespace

CLI::App* add_sim_command(CLI::App& app, SimConfig& cfg) {
  CLI::App* cmd = app.add_subcommand(
      "sim", "Simulate a cluster on this box: run N peer processes per algorithm, inject faults, compare");
  add_sim_options(*cmd, cfg);
  cmd->add_option("--config", cfg.config_file,
                  "A TOML experiment file: keys are these flags without dashes, [[experiment]] tables "
                  "(each with a name) make a sweep into OUT/NAME; flags given here win")
      ->check(CLI::ExistingFile);
  cmd->footer(
      "Examples:\n"
      "  hearsay sim --peers 8 --algo gossip,dpsgd,allreduce --epochs 3 --out out/sim\n"
      "  hearsay sim --peers 8 --algo gossip,sgp,allreduce --faults 'slow:2:3x' --link 1gbit,1ms "
      "--step-time 60ms --overlap --target-acc 0.83 --out out/slow\n"
      "  hearsay sim --peers 8 --algo gossip,allreduce --faults 'kill:5@1.5ep' --out out/kill\n"
      "  hearsay sim --config experiments/acceptance.toml\n"
      "Output: DIR/summary.json, DIR/curves.csv, DIR/report.md, the plots DIR/accuracy_vs_time.png,\n"
      "DIR/accuracy_vs_epochs.png, DIR/consensus_vs_time.png and DIR/accuracy_vs_bytes.png (gnuplot), and "
      "per run DIR/ALGO-R/ with each "
      "peer's log,\nmetrics, checkpoint and settings (peerN.toml, for hearsay peer --config). Ctrl-C stops "
      "the peers and writes the report of the runs so "
      "far.");
  return cmd;
}

namespace {

// One experiment: every algorithm (and repeat) in turn into cfg.out. `label` names the
// experiment in the progress lines of a sweep. Returns the experiment's exit status.
int run_experiment(const SimConfig& cfg, const std::vector<Fault>& faults, const TrainTest& data,
                   const std::string& label) {
  const bool tty = !cfg.no_progress && ::isatty(STDERR_FILENO);
  std::vector<RunResult> runs;
  const int total = static_cast<int>(cfg.algos.size()) * cfg.repeat;
  int index = 0;
  bool all_ok = true;
  ProgressLog log;
  try {
    for (int repeat = 0; repeat < cfg.repeat && !g_interrupted; ++repeat) {
      for (const auto& algo : cfg.algos) {
        if (g_interrupted) break;
        ++index;
        const std::filesystem::path dir =
            std::filesystem::path(cfg.out) / (algo + "-" + std::to_string(repeat));
        const std::string name = label + algo;
        RunResult r = (cfg.engine == "virtual" ? run_virtual_simulation : run_simulation)(
            cfg, faults, algo, repeat, cfg.training.seed + static_cast<std::uint64_t>(repeat), data, dir,
            [&](const RunProgress& p) {
              if (!cfg.no_progress) show_progress(p, name, index, total, tty, log);
            },
            [] { return g_interrupted.load(); });
        if (tty) std::fprintf(stderr, "\r\033[K");
        std::fprintf(stderr, "[%d/%d %s] %s\n", index, total, name.c_str(), run_done_line(r).c_str());
        // Under chaos a run may fail where its algorithm must: the invariants judge it.
        if (cfg.chaos.empty()) all_ok = all_ok && r.status == "ok";
        if (!faults.empty()) r.invariants = check_invariants(r, faults);
        if (const std::string v = first_violation(r); !v.empty()) {
          std::fprintf(stderr, "hearsay sim: %s%s%sbroke an invariant: %s\n",
                       cfg.chaos.empty() ? "" : "--chaos ", cfg.chaos.c_str(), cfg.chaos.empty() ? "" : " ",
                       v.c_str());
          all_ok = false;
        }
        runs.push_back(std::move(r));
        compare_with_allreduce(runs);
        write_report(cfg.out, cfg, runs);  // after every run: an interrupted sweep keeps what it did
      }
    }
    auto written = write_report(cfg.out, cfg, runs);
    const PlotResult plots = write_plots(cfg.out, runs);
    written.insert(written.end(), plots.written.begin(), plots.written.end());
    if (!plots.skipped.empty()) std::fprintf(stderr, "no plots: %s\n", plots.skipped.c_str());
    if (!label.empty()) std::printf("%s\n", label.substr(0, label.size() - 1).c_str());
    std::printf("%s\n", results_table(runs).c_str());
    for (const auto& p : written) std::printf("%s\n", p.c_str());
    std::fflush(stdout);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  if (g_interrupted) return 130;
  return all_ok ? 0 : 1;
}

}  // namespace

int run_sim(const SimConfig& cfg, CLI::App& cmd) {
  // Everything is checked before the first run starts: a bad fault in the third
  // experiment of a sweep must not cost the time of the first two.
  std::vector<Experiment> experiments;
  std::vector<std::vector<Fault>> faults;
  std::map<std::string, TrainTest> data;  // by directory: a sweep over data sets loads each once
  try {
    experiments = cfg.config_file.empty() ? std::vector<Experiment>{{"", cfg}}
                                          : load_experiment_file(cfg.config_file, cmd, cfg);
    for (auto& e : experiments) {
      try {
        draw_chaos(e.config);
        if (!e.config.chaos.empty())
          std::fprintf(stderr, "hearsay sim: %s--chaos %s drew: %s\n",
                       e.name.empty() ? "" : ("experiment '" + e.name + "': ").c_str(),
                       e.config.chaos.c_str(), e.config.faults.c_str());
        faults.push_back(validate(e.config));
        const std::string where = resolve_peer_devices(e.config);
        if (&e == &experiments.front()) std::fprintf(stderr, "hearsay sim: %s\n", where.c_str());
        const std::string dir = resolve_data_dir(e.config.training.data);
        if (!data.count(dir)) data.emplace(dir, load_mnist_format(dir));
      } catch (const DataError& ex) {
        throw DataError(e.name.empty() ? ex.what() : "experiment '" + e.name + "': " + ex.what());
      } catch (const std::exception& ex) {
        throw std::invalid_argument(e.name.empty() ? ex.what() : "experiment '" + e.name + "': " + ex.what());
      }
    }
    // Only once every experiment is valid: the output of an earlier sweep is replaced (with
    // --overwrite) or refused before the first run, for the sweep's folder as a whole.
    std::set<std::string> prepared;
    for (const auto& e : experiments) {
      SimConfig where = e.config;
      if (!e.name.empty()) where.out = std::filesystem::path(e.config.out).parent_path().string();
      if (prepared.insert(where.out).second) prepare_out_dir(where);
    }
  } catch (const DataError& e) {
    // A dataset that is not there is a failure, as in train and peer, not a bad flag.
    std::fprintf(stderr, "hearsay sim: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  // Ctrl-C and SIGTERM end the current run (its peers are stopped); the report is then
  // written with the runs so far.
  StopSignals signals(on_sim_interrupt, /*second_ends_process=*/false);
  int status = 0;
  for (std::size_t i = 0; i < experiments.size() && !g_interrupted; ++i) {
    const auto& e = experiments[i];
    const std::string label = e.name.empty() ? "" : e.name + "/";
    const int s =
        run_experiment(e.config, faults[i], data.at(resolve_data_dir(e.config.training.data)), label);
    status = s == 130 ? 130 : std::max(status, s);
  }
  return g_interrupted ? 130 : status;
}

}  // namespace hearsay::sim
