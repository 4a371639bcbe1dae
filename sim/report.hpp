// The simulator's output files (contract in sim/README.md): summary.json (one record per
// run), curves.csv (one row per evaluation point of every run), report.md (the table)
// and PNG plots drawn by gnuplot when it is installed.
#pragma once
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sim/sim_config.hpp"
#include "sim/sim_run.hpp"

namespace hearsay::sim {

// The summary.json record of one run.
nlohmann::json summary_record(const RunResult& run);

// Writes summary.json, curves.csv and report.md into dir (each atomically: a reader never
// sees half a file) and returns the paths written. Throws std::runtime_error naming the
// file that could not be written.
std::vector<std::filesystem::path> write_report(const std::filesystem::path& dir, const SimConfig& cfg,
                                                const std::vector<RunResult>& runs);

// The report's table as Markdown.
std::string results_table(const std::vector<RunResult>& runs);
// The line that ends a run on the terminal: "done in 62.1 s: averaged-model accuracy
// 0.8762, status ok" (virtual runs: "done in 230.5 virtual s (41.2 s real): ..."). Times
// to a tenth of a second and accuracies to four places, as in the table.
std::string run_done_line(const RunResult& run);

}  // namespace hearsay::sim
