#include "peer/training_flags.hpp"

#include <algorithm>
#include <cmath>

#include "base/number_flag.hpp"
#include "model/data/dataset.hpp"
#include "model/zoo.hpp"

namespace hearsay {

std::int64_t planned_steps(double epochs, std::int64_t steps_per_epoch) {
  return std::max<std::int64_t>(1, std::llround(epochs * static_cast<double>(steps_per_epoch)));
}

std::int64_t epochs_started(double epochs) {
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(epochs - 1e-9)));
}

std::string epochs_text(double epochs) { return exact_flag_number(epochs); }

void add_training_flags(CLI::App& cmd, TrainingSettings& t, const std::string& group, OwnTrainingFlags own) {
  cmd.option_defaults()->group(group);  // hearsay peer: the [train] section of its config file
  cmd.add_option("--model", t.model, model_flag_help())
      ->check(CLI::IsMember(model_names()))
      ->capture_default_str();
  cmd.add_option("--epochs", t.epochs,
                 "Passes over the training shard (fractions allowed: 0.5 is half of one)")
      ->check(number_in({0, 1e6, false, "a number of epochs", "2 or 0.5", /*min_open=*/true}))
      ->capture_default_str();
  cmd.add_option("--batch", t.batch, "Examples per step")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd.add_option("--lr", t.lr, "Learning rate (the peak of the schedule)")
      ->check(number_in({0, 3.4e38, false, "a learning rate", "0.1"}))
      ->capture_default_str();
  cmd.add_option("--momentum", t.momentum, "SGD momentum")
      ->check(number_in({0, 1, true, "a momentum", "0.9"}))
      ->capture_default_str();
  cmd.add_flag("--nesterov", t.nesterov, "Nesterov momentum (SGD)");
  cmd.add_option("--weight-decay", t.weight_decay, "L2 penalty (SGD) or decoupled decay (AdamW)")
      ->check(number_in({0, 3.4e38, false, "a weight decay", "5e-4"}))
      ->capture_default_str();
  cmd.add_option("--optimizer", t.optimizer, "Optimizer")
      ->check(CLI::IsMember({"sgd", "adamw"}))
      ->capture_default_str();
  cmd.add_option(
         "--lr-schedule", t.lr_schedule,
         "cosine[:WARMUP_STEPS|:WARMUP_PERCENT%] (a linear warm-up, then from --lr down to 0 over the "
         "run) | constant | step:STEP_SIZE:GAMMA")
      ->capture_default_str();
  if (!own.device)
    cmd.add_option("--device", t.device,
                   "Where to train: auto | cpu | cuda | cuda:I (cuda needs the CUDA backend)")
        ->capture_default_str();
  if (!own.threads)
    cmd.add_option("--threads", t.threads, "Compute threads (default: the cores this process may run on)")
        ->check(CLI::Range(1, 1024));
  cmd.add_option("--seed", t.seed,
                 "Seed for initialisation, shuffling, partitions and a peer's partner choice")
      ->capture_default_str();
  if (!own.init_seed)
    cmd.add_option("--init-seed", t.init_seed,
                   "Seed of the initial parameters only (default: --seed): peers that start apart (hearsay "
                   "sim --distinct-init), to watch mixing close the gap");
  cmd.add_option("--data", t.data,
                 "MNIST-format directory, or 'synthetic' (default: $HEARSAY_DATA, else " +
                     std::string(kDefaultDataDir) + ")");
  cmd.add_option("--partition", t.partition,
                 "How shards (RANK/WORLD) split the data: iid | dirichlet:ALPHA | by-label")
      ->capture_default_str();
}

std::vector<std::string> training_arguments(const TrainingSettings& t) {
  std::vector<std::string> a = {"--model",        t.model,
                                "--epochs",       exact_flag_number(t.epochs),
                                "--batch",        std::to_string(t.batch),
                                "--lr",           exact_flag_number(t.lr),
                                "--momentum",     exact_flag_number(t.momentum),
                                "--weight-decay", exact_flag_number(t.weight_decay),
                                "--optimizer",    t.optimizer,
                                "--lr-schedule",  t.lr_schedule,
                                "--device",       t.device,
                                "--seed",         std::to_string(t.seed),
                                "--partition",    t.partition};
  if (t.nesterov) a.push_back("--nesterov");
  if (t.threads > 0) a.insert(a.end(), {"--threads", std::to_string(t.threads)});
  if (t.init_seed) a.insert(a.end(), {"--init-seed", std::to_string(*t.init_seed)});
  if (!t.data.empty()) a.insert(a.end(), {"--data", t.data});
  return a;
}

std::unique_ptr<Optimizer> make_optimizer(const TrainingSettings& t, std::size_t parameters) {
  if (t.optimizer == "sgd")
    return make_sgd(
        parameters,
        SgdOptions{.momentum = t.momentum, .weight_decay = t.weight_decay, .nesterov = t.nesterov});
  AdamWOptions adamw;
  adamw.weight_decay = t.weight_decay;
  return make_adamw(parameters, adamw);
}

}  // namespace hearsay
