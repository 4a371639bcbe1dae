// The simulator's PNG plots (sim/README.md, the output contract), drawn by gnuplot when
// it is installed: a missing or failing gnuplot costs the plots, never the run's results.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "sim/sim_run.hpp"

namespace hearsay::sim {

struct PlotResult {
  std::vector<std::filesystem::path> written;  // the PNG files written
  // Empty, or why no plots were drawn, e.g. "gnuplot not found on PATH: install gnuplot-nox
  // (scripts/setup does)".
  std::string skipped;
};

// Draws into dir (created if needed):
//   accuracy_vs_time.png    averaged-model test accuracy against wall time (s),
//   accuracy_vs_epochs.png  the same against run_epochs,
//   consensus_vs_time.png   consensus distance against wall time (log y axis when any value
//                           is > 0: exact zeros drawn a decade below the smallest positive
//                           value, their run's title saying "exactly 0: drawn at F"),
// one line with points per run, titled by the algorithm (plus " (TOPOLOGY)" when the
// topology is not "random"/"ring", plus " #R" when any run has repeat > 0), and a dashed
// horizontal line at the target accuracy when a run has target_acc. Runs without
// evaluations are left out; with no run left, nothing is written and skipped says so.
// `gnuplot` is the executable (looked up on PATH when it has no '/'), fed the script on
// its stdin (no shell). Never throws for a missing, failing or hanging (60 s) gnuplot: it
// returns skipped with the reason (gnuplot's output, trimmed). Each PNG appears
// atomically: gnuplot writes NAME.png.tmp, renamed once gnuplot succeeded; a failure
// leaves no partial file.
PlotResult write_plots(const std::filesystem::path& dir, const std::vector<RunResult>& runs,
                       const std::string& gnuplot = "gnuplot");

}  // namespace hearsay::sim
