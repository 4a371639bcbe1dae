// The training settings `hearsay train` and `hearsay peer` share: one struct and one
// registration of their flags, so both commands accept the same names, defaults and
// ranges.
#pragma once
#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/optim/optimizer.hpp"

namespace hearsay {

struct TrainingSettings {
  std::string model = "lenet";
  double epochs = 2;  // fractions allowed: 0.5 is the first half of an epoch
  int batch = 64;
  float lr = 0.05f;
  float momentum = 0.9f;
  float weight_decay = 0.0f;
  bool nesterov = false;
  std::string optimizer = "sgd";
  // Warm up over the first 15% of the run, then decay --lr to 0: decentralized peers drift
  // apart most while the rate is high and the model changes fast, and the warm-up is worth
  // up to 1.3 points of accuracy to gossip and sgp (docs/PERFORMANCE.md, "Fair runs: a global
  // budget under a slow peer"). "constant" is PyTorch's default.
  std::string lr_schedule = "cosine:15%";
  std::string device = "auto";  // auto | cpu | cuda | cuda:I (each command checks what it can run)
  int threads = 0;              // 0: every core this process may run on
  std::uint64_t seed = 0;
  std::optional<std::uint64_t> init_seed;  // of the initial parameters; none: seed
  std::string data;                        // empty: $HEARSAY_DATA or the Debian package's directory
  std::string partition = "iid";           // how shards split the training set
  bool operator==(const TrainingSettings&) const = default;
};

// The steps of `epochs` epochs (fractions allowed) of steps_per_epoch each, rounded to the
// nearest, at least 1: what a run of --epochs plans, schedules and ends at.
std::int64_t planned_steps(double epochs, std::int64_t steps_per_epoch);
// The epochs a training loop starts to take them: 0.37 starts one, 2 two.
std::int64_t epochs_started(double epochs);
// --epochs as people write it: "2", "0.37".
std::string epochs_text(double epochs);

// The seed of the initial parameters: --init-seed, else --seed.
inline std::uint64_t init_seed(const TrainingSettings& t) { return t.init_seed.value_or(t.seed); }

// The flags a command declares itself, with a meaning of its own (hearsay sim's --device
// spreads peers over GPUs, its --threads runs the virtual engine, --distinct-init sets each
// peer's --init-seed).
struct OwnTrainingFlags {
  bool device = false, threads = false, init_seed = false;
};

// Registers --model, --epochs, --batch, --lr, --momentum, --nesterov, --weight-decay,
// --optimizer, --lr-schedule, --device, --threads, --seed, --init-seed, --data and
// --partition on cmd (less those of `own`), bound to t (which must outlive the parse), in
// the option group `group` (hearsay peer's config section).
void add_training_flags(CLI::App& cmd, TrainingSettings& t, const std::string& group = "train",
                        OwnTrainingFlags own = {});

// The command line that gives t's settings exactly, as add_training_flags reads them
// (numbers as exact_flag_number writes them): what hearsay sim hands its peers. Parsed with
// add_training_flags it gives back t (tests/test_sim_setup.cpp holds every field to it).
std::vector<std::string> training_arguments(const TrainingSettings& t);

// The optimizer of --optimizer with --momentum, --nesterov and --weight-decay, for a model
// of `parameters` parameters.
std::unique_ptr<Optimizer> make_optimizer(const TrainingSettings& t, std::size_t parameters);

}  // namespace hearsay
