// The TOML experiment file of `hearsay sim` (--config FILE): a whole sweep in one file.
// Top-level keys are defaults for every experiment; each [[experiment]] table is one
// experiment, named, whose keys override them. Keys are the flags of `hearsay sim` without
// their dashes, and values pass through the flags' own CLI11 validators and conversions:
//
//   peers = 8
//   algo = ["gossip", "dpsgd"]        # or "gossip,dpsgd", as --algo
//   out = "out/sweep"
//   peer-arg = ["--round-timeout", "3s"]
//
//   [[experiment]]
//   name = "slow-peer"                # results go to OUT/slow-peer/
//   faults = "slow:2:3x"
//   target-acc = 0.83
//
// Precedence: command-line flags > the experiment's table > the top level > defaults.
#pragma once
#include <CLI/CLI.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "sim/sim_config.hpp"

namespace hearsay::sim {

struct Experiment {
  std::string name;  // "" for a file without [[experiment]] tables
  SimConfig config;  // config.out is OUT/NAME (or OUT when name is empty)
};

// Reads `path` for the `sim` subcommand `cmd` whose flags are bound to `base` (already
// parsed from the command line). Returns the experiments in file order. Neither `cmd` nor
// `base` is modified. Throws std::invalid_argument saying file:line and what to change; a
// file with any error gives no experiments. Settings the flags cannot check one by one
// (validate() in sim_config.hpp) are left to the caller.
std::vector<Experiment> load_experiment_file(const std::filesystem::path& path, CLI::App& cmd,
                                             const SimConfig& base);

}  // namespace hearsay::sim
