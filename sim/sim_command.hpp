// `hearsay sim`: runs every algorithm of --algo in turn (and --repeat times) on the same
// data, seed and faults, then writes the report; with --config FILE, every experiment of
// the file in turn, each into its own directory.
#pragma once
#include <CLI/CLI.hpp>

#include "sim/sim_config.hpp"

namespace hearsay::sim {

CLI::App* add_sim_command(CLI::App& app, SimConfig& cfg);
// Exit status: 0 when every run ended with status ok, 1 when one did not, 2 for bad
// settings or data, 130 when interrupted (the report then has the runs that ended).
// `cmd` is the subcommand add_sim_command returned, parsed: a --config file's values give
// way to the flags it was given.
int run_sim(const SimConfig& cfg, CLI::App& cmd);

}  // namespace hearsay::sim
