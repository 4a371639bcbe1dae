// `hearsay train`: one process, no gossip. The single-peer baseline and the check that
// the model library learns.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace hearsay {

struct TrainOptions {
  std::string model = "lenet";
  int epochs = 2;
  int batch = 64;
  float lr = 0.05f;
  float momentum = 0.9f;
  float weight_decay = 0.0f;
  bool nesterov = false;
  std::string optimizer = "sgd";
  std::string lr_schedule = "cosine";  // decay --lr to 0 over the run; "constant" is PyTorch's default
  std::string device = "auto";
  int threads = 0;  // 0: every core this process may run on
  std::uint64_t seed = 0;
  std::string data;  // empty: $HEARSAY_DATA or the Debian package's directory
  std::string shard = "0/1";
  std::string partition = "iid";
  std::string metrics;
  double progress_interval_s = -1;  // < 0: 0.25 s on a terminal, 10 s otherwise
};

// Registers the subcommand and its flags; the options are filled in when parsed.
CLI::App* add_train_command(CLI::App& app, TrainOptions& options);
// Runs a training. Returns the process exit code (0 ok, 1 failure, 130 interrupted).
int run_train(const TrainOptions& options);

}  // namespace hearsay
