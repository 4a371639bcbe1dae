#include "sim/sim_command.hpp"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>

#include "model/data/dataset.hpp"
#include "peer/stop_signals.hpp"
#include "sim/plots.hpp"
#include "sim/report.hpp"
#include "sim/sim_run.hpp"

namespace hearsay::sim {
namespace {

std::atomic<bool> g_interrupted{false};
extern "C" void on_sim_interrupt(int) { g_interrupted.store(true); }

void show_progress(const RunProgress& p, int index, int total, bool tty) {
  char line[256];
  std::snprintf(line, sizeof line, "[%d/%d %s] %5.1f s  epoch %.2f/%d  %d running  %.0f samples/s  acc %s",
                index, total, p.algo->c_str(), p.time_s, p.run_epochs, p.epochs, p.running, p.samples_per_s,
                p.last_acc ? std::to_string(*p.last_acc).substr(0, 6).c_str() : "-");
  if (tty) {
    std::fprintf(stderr, "\r\033[K%s", line);
  } else {
    static double last_printed = -100;
    if (p.time_s - last_printed < 10) return;
    last_printed = p.time_s;
    std::fprintf(stderr, "%s\n", line);
  }
}

}  // namespace

CLI::App* add_sim_command(CLI::App& app, SimConfig& cfg) {
  CLI::App* cmd = app.add_subcommand(
      "sim", "Simulate a cluster on this box: run N peer processes per algorithm, inject faults, compare");
  add_sim_options(*cmd, cfg);
  cmd->footer(
      "Examples:\n"
      "  hearsay sim --peers 8 --algo gossip,dpsgd,allreduce --epochs 3 --out out/sim\n"
      "  hearsay sim --peers 8 --algo gossip,sgp,allreduce --faults 'slow:2:3x' --link 1gbit,1ms "
      "--target-acc 0.83 "
      "--out out/slow\n"
      "  hearsay sim --peers 8 --algo gossip,allreduce --faults 'kill:5@1.5ep' --out out/kill\n"
      "Output: DIR/summary.json, DIR/curves.csv, DIR/report.md, the plots DIR/accuracy_vs_time.png,\n"
      "DIR/accuracy_vs_epochs.png and DIR/consensus_vs_time.png (gnuplot), and per run DIR/ALGO-R/ with each "
      "peer's log,\nmetrics and checkpoint. Ctrl-C stops the peers and writes the report of the runs so "
      "far.");
  return cmd;
}

int run_sim(const SimConfig& cfg) {
  std::vector<Fault> faults;
  TrainTest data;
  try {
    faults = validate(cfg);
    data = load_mnist_format(resolve_data_dir(cfg.data));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  const bool tty = cfg.progress && ::isatty(STDERR_FILENO);
  // Ctrl-C and SIGTERM end the current run (its peers are stopped); the report is then
  // written with the runs so far.
  StopSignals signals(on_sim_interrupt, /*one_shot=*/false);
  std::vector<RunResult> runs;
  const int total = static_cast<int>(cfg.algos.size()) * cfg.repeat;
  int index = 0;
  bool all_ok = true;
  try {
    for (int repeat = 0; repeat < cfg.repeat && !g_interrupted; ++repeat) {
      for (const auto& algo : cfg.algos) {
        if (g_interrupted) break;
        ++index;
        const std::filesystem::path dir =
            std::filesystem::path(cfg.out) / (algo + "-" + std::to_string(repeat));
        RunResult r = run_simulation(
            cfg, faults, algo, repeat, cfg.seed + static_cast<std::uint64_t>(repeat), data, dir,
            [&](const RunProgress& p) {
              if (cfg.progress) show_progress(p, index, total, tty);
            },
            [] { return g_interrupted.load(); });
        if (tty) std::fprintf(stderr, "\r\033[K");
        const Evaluation* last = r.final_evaluation();
        std::fprintf(stderr, "[%d/%d %s] done in %.1f s: averaged-model accuracy %s, status %s\n", index,
                     total, algo.c_str(), r.wall_s,
                     last ? std::to_string(last->acc_avg_model).substr(0, 6).c_str() : "-", r.status.c_str());
        all_ok = all_ok && r.status == "ok";
        runs.push_back(std::move(r));
        write_report(cfg.out, cfg, runs);  // after every run: an interrupted sweep keeps what it did
      }
    }
    auto written = write_report(cfg.out, cfg, runs);
    const PlotResult plots = write_plots(cfg.out, runs);
    written.insert(written.end(), plots.written.begin(), plots.written.end());
    if (!plots.skipped.empty()) std::fprintf(stderr, "no plots: %s\n", plots.skipped.c_str());
    std::printf("%s\n", results_table(runs).c_str());
    for (const auto& p : written) std::printf("%s\n", p.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  if (g_interrupted) return 130;
  return all_ok ? 0 : 1;
}

}  // namespace hearsay::sim
