// `hearsay train`: one process, no gossip. The single-peer baseline and the check that
// the model library learns.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "peer/training_flags.hpp"

namespace hearsay {

struct TrainOptions : TrainingSettings {
  std::string shard = "0/1";
  std::string metrics;
  std::string save;                 // checkpoint file written at the end (or on an interrupt); empty: none
  double progress_interval_s = -1;  // < 0: 0.25 s on a terminal, 10 s otherwise
};

// Registers the subcommand and its flags; the options are filled in when parsed.
CLI::App* add_train_command(CLI::App& app, TrainOptions& options);
// Runs a training. Returns the process exit code (0 ok, 1 failure, 130 interrupted).
int run_train(const TrainOptions& options);

}  // namespace hearsay
