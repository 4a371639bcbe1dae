#include "peer/train_command.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/gemm.hpp"
#include "model/checkpoint.hpp"
#include "model/data/dataset.hpp"
#include "model/data/partition.hpp"
#include "model/device.hpp"
#include "model/optim/optimizer.hpp"
#include "model/trainer.hpp"
#include "model/training_loop.hpp"
#include "model/training_session.hpp"
#include "model/zoo.hpp"
#include "peer/metrics.hpp"
#include "peer/run_output.hpp"

namespace hearsay {

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<bool> g_interrupted{false};
extern "C" void on_interrupt(int) { g_interrupted.store(true); }

double seconds_since(Clock::time_point t0) { return seconds(Clock::now() - t0); }

// "epoch 2/3  train loss ...": an interrupted epoch says how far it got.
void print_epoch(const EpochReport& e, double epochs, std::int64_t examples, const BatchStats& test,
                 bool interrupted) {
  char part[96] = "";
  if (!e.complete)
    std::snprintf(part, sizeof part,
                  interrupted ? " (interrupted after %lld of %lld examples)"
                              : " (%lld of %lld examples: where --epochs ends)",
                  static_cast<long long>(e.train.count), static_cast<long long>(examples));
  std::printf(
      "epoch %lld/%s%s  train loss %.4f  train acc %.4f  test loss %.4f  test acc %.4f  %.0f samples/s  %.1f "
      "s\n",
      static_cast<long long>(e.epoch), epochs_text(epochs).c_str(), part, e.train.mean_loss(),
      e.train.accuracy(), test.mean_loss(), test.accuracy(),
      static_cast<double>(e.train.count) / e.train_seconds, e.train_seconds);
  std::fflush(stdout);
}

}  // namespace

CLI::App* add_train_command(CLI::App& app, TrainOptions& o) {
  CLI::App* cmd =
      app.add_subcommand("train", "Train one model in one process, no gossip: the single-peer baseline");
  add_training_flags(*cmd, o);
  cmd->add_option("--shard", o.shard, "Train on shard RANK/WORLD of the training set")->capture_default_str();
  cmd->add_option("--metrics", o.metrics, "Write one JSON object per line to this file");
  cmd->add_option(
         "--save", o.save,
         "Write the trained model to this safetensors file at the end (also when interrupted): "
         "parameters and BatchNorm statistics under PyTorch state_dict names, with the test accuracy "
         "in its metadata")
      ->type_name("FILE");
  cmd->add_option("--progress-every", o.progress_interval_s,
                  "Seconds between progress lines (default: 0.25 on a terminal, 10 otherwise)");
  cmd->footer(
      "Examples:\n"
      "  hearsay train --model lenet --epochs 3 --batch 64 --lr 0.05\n"
      "  hearsay train --data synthetic --model mlp --epochs 1 --metrics run.jsonl\n"
      "  hearsay train --model resnet20 --epochs 3 --batch 128 --lr 0.1 --weight-decay 5e-4 --save "
      "rn20.safetensors\n"
      "  hearsay train --shard 2/8 --partition dirichlet:0.5   (what peer 2 of 8 would train on)");
  return cmd;
}

namespace {

// One `hearsay train` run: the model, data and session it sets up, and the hooks through
// which the shared training loop (model/training_loop.hpp) reports to it.
class SingleProcessRun {
 public:
  // Loads the data and builds the model and its session on `device`.
  SingleProcessRun(const TrainOptions& o, const DeviceChoice& device, const ShardSpec& shard,
                   const PartitionSpec& partition);
  // Trains (a signal stops it after the current step) and writes the final record: 0, or
  // 130 when interrupted.
  int run();

 private:
  void announce(double load_s) const;
  TrainingHooks hooks();
  void after_step(const StepReport& r);
  void after_epoch(const EpochReport& e);
  void save() const;

  const TrainOptions& o_;
  const DeviceChoice device_;
  const int threads_;
  const std::string shard_text_, partition_text_;
  JsonLinesFile metrics_;
  std::unique_ptr<Model> model_ = make_model(o_.model);
  TrainTest data_;
  std::vector<std::int64_t> order_;
  std::int64_t steps_per_epoch_ = 0;
  std::unique_ptr<LrSchedule> schedule_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<TrainingSession> session_;
  Rng shuffle_rng_{o_.seed ^ 0x5eed5eed5eed5eedULL};
  ProgressLine progress_{o_.progress_interval_s};
  Clock::time_point started_ = Clock::now(), epoch_started_ = Clock::now();
  double train_s_ = 0, last_test_acc_ = 0;
  BatchStats epoch_so_far_;
  TrainingPosition position_;
};

SingleProcessRun::SingleProcessRun(const TrainOptions& o, const DeviceChoice& device, const ShardSpec& shard,
                                   const PartitionSpec& partition)
    : o_(o),
      device_(device),
      threads_(o.threads > 0 ? o.threads : usable_cores()),
      shard_text_(to_string(shard)),
      partition_text_(to_string(partition)),
      metrics_(o.metrics) {  // fails on an unwritable path before anything is loaded
  cpu::set_blas_threads(1);  // parallelism is over the batch, one BLAS thread per compute thread
  model_->init(init_seed(o));
  const auto t_load = Clock::now();
  data_ = load_mnist_format(resolve_data_dir(o.data));
  if (data_.train.pixels() != model_->input_floats())
    throw std::runtime_error("data images have " + std::to_string(data_.train.pixels()) + " pixels, model '" +
                             o.model + "' expects " + std::to_string(model_->input_floats()));
  order_ = shard_indices(data_.train, shard, partition, o.seed);
  if (order_.empty()) throw std::runtime_error("shard " + o.shard + " of the training set is empty");
  steps_per_epoch_ = (static_cast<std::int64_t>(order_.size()) + o.batch - 1) / o.batch;
  schedule_ = parse_lr_schedule(o.lr_schedule, o.lr, planned_steps(o.epochs, steps_per_epoch_));
  optimizer_ = make_optimizer(o, static_cast<std::size_t>(model_->param_count()));
  session_ = make_training_session(device.device, *model_, *optimizer_, {threads_, o.batch});
  session_->bind_data(data_.train, data_.test);
  announce(seconds_since(t_load));
}

void SingleProcessRun::announce(double load_s) const {
  const std::string where = device_.device.is_cuda()
                                ? session_->backend().describe()
                                : std::to_string(threads_) + " compute thread" +
                                      (threads_ == 1 ? ", " : "s, ") + cpu::blas_description();
  std::fprintf(stderr,
               "hearsay train: %s (%lld parameters, fingerprint %s)\n"
               "  data %s: %lld train examples (shard %s, %s), %lld test, loaded in %.2f s\n"
               "  device %s (%s): %s\n"
               "  %s, %s, batch %d, %s epoch%s of %lld steps\n",
               o_.model.c_str(), static_cast<long long>(model_->param_count()), model_->fingerprint().c_str(),
               data_.source.c_str(), static_cast<long long>(order_.size()), shard_text_.c_str(),
               partition_text_.c_str(), static_cast<long long>(data_.test.count), load_s,
               device_.device.str().c_str(), device_.reason.c_str(), where.c_str(),
               optimizer_->name().c_str(), schedule_->describe().c_str(), o_.batch,
               epochs_text(o_.epochs).c_str(), o_.epochs == 1 ? "" : "s",
               static_cast<long long>(steps_per_epoch_));
}

TrainingHooks SingleProcessRun::hooks() {
  TrainingHooks h;
  h.epoch_order = [this](std::int64_t) -> const std::vector<std::int64_t>& {
    shuffle_rng_.shuffle(order_.begin(), order_.end());
    epoch_so_far_ = {};
    epoch_started_ = Clock::now();
    return order_;
  };
  // --epochs with a fraction ends mid-epoch, at its planned step.
  h.should_stop = [this] {
    return g_interrupted.load() || position_.step >= planned_steps(o_.epochs, steps_per_epoch_);
  };
  h.after_gradients = [this](const BatchStats& s, std::chrono::nanoseconds) {
    if (!std::isfinite(s.loss_sum))
      throw std::runtime_error("loss became " + std::to_string(s.loss_sum) + " at step " +
                               std::to_string(position_.step + 1) + ": lower --lr");
  };
  h.after_step = [this](const StepReport& r) { after_step(r); };
  h.after_epoch = [this](const EpochReport& e) { after_epoch(e); };
  return h;
}

void SingleProcessRun::after_step(const StepReport& r) {
  epoch_so_far_ += r.stats;
  char line[256];
  const double rate = static_cast<double>(epoch_so_far_.count) / seconds_since(epoch_started_);
  std::snprintf(line, sizeof line, "epoch %lld/%s  step %lld/%lld  loss %.4f  %.0f samples/s",
                static_cast<long long>(r.position.epoch), epochs_text(o_.epochs).c_str(),
                static_cast<long long>(r.position.epoch_step), static_cast<long long>(steps_per_epoch_),
                r.stats.mean_loss(), rate);
  progress_.update(line);
}

void SingleProcessRun::after_epoch(const EpochReport& e) {
  train_s_ += e.train_seconds;
  const BatchStats test = session_->evaluate();
  last_test_acc_ = test.accuracy();
  progress_.clear();
  print_epoch(e, o_.epochs, static_cast<std::int64_t>(order_.size()), test, g_interrupted.load());
  metrics_.write({{"type", "epoch"},
                  {"time_s", seconds_since(started_)},
                  {"epoch", e.epoch},
                  {"step", position_.step},
                  {"loss", e.train.mean_loss()},
                  {"train_acc", e.train.accuracy()},
                  {"test_loss", test.mean_loss()},
                  {"test_acc", test.accuracy()},
                  {"samples_per_s", static_cast<double>(e.train.count) / e.train_seconds},
                  {"examples", e.train.count},
                  {"complete", e.complete}});
}

// The trained model, atomically (a failed write leaves no partial file). The test accuracy goes into the
// metadata, so a reader can check that the file gives it.
void SingleProcessRun::save() const {
  session_->params_to_host();
  TrainingState state;
  state.step = position_.step;
  state.epoch = position_.epoch;
  state.epoch_step = position_.epoch_step;
  state.seed = o_.seed;
  // The trained model only: no optimizer state, so that the file is a model's state_dict
  // that torch's load_state_dict(strict=True) takes as it is.
  state.optimizer = optimizer_->name();
  state.optimizer_steps = optimizer_->steps_taken();
  char acc[32];
  std::snprintf(acc, sizeof acc, "%.6f", last_test_acc_);
  state.extra["test_acc"] = acc;
  write_checkpoint(o_.save, *model_, state);
  std::printf("saved %s\n", o_.save.c_str());
}

int SingleProcessRun::run() {
  metrics_.write({{"type", "start"},
                  {"model", o_.model},
                  {"params", model_->param_count()},
                  {"fingerprint", model_->fingerprint()},
                  {"train_examples", order_.size()},
                  {"test_examples", data_.test.count},
                  {"batch", o_.batch},
                  {"epochs", epochs_json(o_.epochs)},
                  {"device", device_.device.str()},
                  {"threads", threads_},
                  {"seed", o_.seed},
                  {"optimizer", optimizer_->name()},
                  {"lr_schedule", schedule_->describe()}});
  g_interrupted.store(false);
  auto old_int = std::signal(SIGINT, on_interrupt);
  auto old_term = std::signal(SIGTERM, on_interrupt);
  started_ = Clock::now();
  try {
    run_training(*session_, *schedule_, epochs_started(o_.epochs), o_.batch, position_, hooks());
  } catch (...) {
    std::signal(SIGINT, old_int);
    std::signal(SIGTERM, old_term);
    throw;
  }
  std::signal(SIGINT, old_int);
  std::signal(SIGTERM, old_term);
  const bool interrupted = g_interrupted.load();
  if (!o_.save.empty()) save();
  metrics_.write({{"type", "final"},
                  {"time_s", seconds_since(started_)},
                  {"train_s", train_s_},
                  {"step", position_.step},
                  {"test_acc", last_test_acc_},
                  {"interrupted", interrupted}});
  if (interrupted) {
    std::fprintf(stderr, "hearsay train: interrupted after step %lld\n",
                 static_cast<long long>(position_.step));
    return 130;
  }
  std::printf("final test accuracy %.4f after %lld steps, %.1f s training\n", last_test_acc_,
              static_cast<long long>(position_.step), train_s_);
  if (o_.save.empty())
    std::printf("the trained model was not saved: give --save FILE to keep it (a safetensors state_dict)\n");
  return 0;
}

}  // namespace

int run_train(const TrainOptions& o) {
  try {
    // Validate every textual option before spending time on data.
    ShardSpec shard;
    PartitionSpec partition;
    DeviceChoice device;
    try {
      shard = parse_shard(o.shard);
      partition = parse_partition(o.partition);
      // Only the text is judged here; the run's real length is known after loading the
      // data, and the schedule is built (and its warm-up checked against it) then.
      parse_lr_schedule(o.lr_schedule, o.lr, std::numeric_limits<std::int32_t>::max());
      device = choose_device(parse_device(o.device), local_rank_from_environment());
      if (!o.save.empty()) {
        // Find out now, not after hours of training, that the file cannot be written.
        const auto dir = std::filesystem::absolute(o.save).parent_path();
        std::error_code ec;
        if (!std::filesystem::is_directory(dir, ec))
          throw std::invalid_argument("--save " + o.save + ": directory " + dir.string() +
                                      " does not exist (create it first)");
        if (std::filesystem::is_directory(o.save, ec))
          throw std::invalid_argument("--save " + o.save + " is a directory; give a file name");
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "hearsay train: %s\n", e.what());
      return 2;
    }
    SingleProcessRun run(o, device, shard, partition);
    return run.run();
  } catch (const DeviceUnavailable& e) {
    std::fprintf(stderr, "hearsay train: %s\n", e.what());
    return 2;
  } catch (const DataError& e) {
    std::fprintf(stderr, "hearsay train: %s\n", e.what());
    return 1;
  } catch (const std::invalid_argument& e) {
    // Bad option values that only the library can judge (schedule text, shard, ...).
    std::fprintf(stderr, "hearsay train: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hearsay train: %s\n", e.what());
    return 1;
  }
}

}  // namespace hearsay
