// Small `hearsay sim --engine virtual` runs for tests: 4 MLP peers over the synthetic data
// set (6,000 examples), paced at 10 ms a step behind 1 Gbit/s, 1 ms links, evaluated
// every quarter epoch.
#pragma once
#include <filesystem>
#include <string>

#include "model/data/dataset.hpp"
#include "sim/sim_config.hpp"
#include "sim/virtual_run.hpp"

namespace hearsay::sim::testing {

inline const TrainTest& synthetic() {
  static const TrainTest data = load_mnist_format("synthetic");
  return data;
}

// name: the output directory's, under the temporary directory.
inline SimConfig small_virtual_config(const std::string& name) {
  SimConfig cfg;
  cfg.engine = "virtual";
  cfg.peers = 4;
  cfg.training.model = "mlp";
  cfg.training.epochs = 1;
  cfg.training.batch = 32;
  cfg.training.lr = 0.05f;
  cfg.step_time = "10ms";
  cfg.link = "1gbit,1ms";
  cfg.eval_every = 0.25;
  cfg.out = (std::filesystem::temp_directory_path() / ("hearsay-vsim-" + name)).string();
  return cfg;
}

// One run of `algo` (repeat 0), checked as `hearsay sim` checks its settings first.
inline RunResult run_virtual(const SimConfig& cfg, const std::string& algo) {
  const auto faults = validate(cfg);
  return run_virtual_simulation(
      cfg, faults, algo, 0, cfg.training.seed, synthetic(), std::filesystem::path(cfg.out) / (algo + "-0"),
      [](const RunProgress&) {}, [] { return false; });
}

}  // namespace hearsay::sim::testing
