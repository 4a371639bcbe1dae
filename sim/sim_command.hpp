// `hearsay sim`: runs every algorithm of --algo in turn (and --repeat times) on the same
// data, seed and faults, then writes the report.
#pragma once
#include <CLI/CLI.hpp>

#include "sim/sim_config.hpp"

namespace hearsay::sim {

CLI::App* add_sim_command(CLI::App& app, SimConfig& cfg);
// Exit status: 0 when every run ended with status ok, 1 when one did not, 2 for bad
// settings or data, 130 when interrupted (the report then has the runs that ended).
int run_sim(const SimConfig& cfg);

}  // namespace hearsay::sim
