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
#include "model/data/dataset.hpp"
#include "model/data/partition.hpp"
#include "model/device.hpp"
#include "model/optim/optimizer.hpp"
#include "model/trainer.hpp"
#include "model/training_loop.hpp"
#include "model/training_session.hpp"
#include "model/zoo.hpp"
#include "peer/run_output.hpp"

namespace hearsay {

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<bool> g_interrupted{false};
extern "C" void on_interrupt(int) { g_interrupted.store(true); }

double seconds_since(Clock::time_point t0) { return seconds(Clock::now() - t0); }

// "epoch 2/3  train loss ...": an interrupted epoch says how far it got.
void print_epoch(const EpochReport& e, int epochs, std::int64_t examples, const BatchStats& test) {
  char part[64] = "";
  if (!e.complete)
    std::snprintf(part, sizeof part, " (interrupted after %lld of %lld examples)",
                  static_cast<long long>(e.train.count), static_cast<long long>(examples));
  std::printf(
      "epoch %lld/%d%s  train loss %.4f  train acc %.4f  test loss %.4f  test acc %.4f  %.0f samples/s  %.1f "
      "s\n",
      static_cast<long long>(e.epoch), epochs, part, e.train.mean_loss(), e.train.accuracy(),
      test.mean_loss(), test.accuracy(), static_cast<double>(e.train.count) / e.train_seconds,
      e.train_seconds);
  std::fflush(stdout);
}

}  // namespace

CLI::App* add_train_command(CLI::App& app, TrainOptions& o) {
  CLI::App* cmd =
      app.add_subcommand("train", "Train one model in one process, no gossip: the single-peer baseline");
  add_training_flags(*cmd, o);
  cmd->add_option("--shard", o.shard, "Train on shard RANK/WORLD of the training set")->capture_default_str();
  cmd->add_option("--metrics", o.metrics, "Write one JSON object per line to this file");
  cmd->add_option("--progress-every", o.progress_interval_s,
                  "Seconds between progress lines (default: 0.25 on a terminal, 10 otherwise)");
  cmd->footer(
      "Examples:\n"
      "  hearsay train --model lenet --epochs 3 --batch 64 --lr 0.05\n"
      "  hearsay train --data synthetic --model mlp --epochs 1 --metrics run.jsonl\n"
      "  hearsay train --shard 2/8 --partition dirichlet:0.5   (what peer 2 of 8 would train on)");
  return cmd;
}

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
    } catch (const std::exception& e) {
      std::fprintf(stderr, "hearsay train: %s\n", e.what());
      return 2;
    }
    const int threads = o.threads > 0 ? o.threads : usable_cores();
    cpu::set_blas_threads(1);  // parallelism is over the batch, one BLAS thread per compute thread

    JsonLinesFile metrics(o.metrics);  // fail on an unwritable path before loading anything
    auto model = make_model(o.model);
    model->init(o.seed);
    const std::string data_dir = resolve_data_dir(o.data);
    const auto t_load = Clock::now();
    TrainTest data = load_mnist_format(data_dir);
    if (data.train.pixels() != model->input_floats())
      throw std::runtime_error("data images have " + std::to_string(data.train.pixels()) +
                               " pixels, model '" + o.model + "' expects " +
                               std::to_string(model->input_floats()));
    std::vector<std::int64_t> order = shard_indices(data.train, shard, partition, o.seed);
    if (order.empty()) throw std::runtime_error("shard " + o.shard + " of the training set is empty");

    const std::int64_t steps_per_epoch = (static_cast<std::int64_t>(order.size()) + o.batch - 1) / o.batch;
    const std::int64_t total_steps = steps_per_epoch * o.epochs;
    auto schedule = parse_lr_schedule(o.lr_schedule, o.lr, total_steps);
    auto optimizer = make_optimizer(o, static_cast<std::size_t>(model->param_count()));
    auto session = make_training_session(device.device, *model, *optimizer, {threads, o.batch});
    session->bind_data(data.train, data.test);
    const double load_s = seconds_since(t_load);
    const std::string where = device.device.is_cuda()
                                  ? session->backend().describe()
                                  : std::to_string(threads) + " compute thread" +
                                        (threads == 1 ? ", " : "s, ") + cpu::blas_description();

    std::fprintf(stderr,
                 "hearsay train: %s (%lld parameters, fingerprint %s)\n"
                 "  data %s: %lld train examples (shard %s, %s), %lld test, loaded in %.2f s\n"
                 "  device %s (%s): %s\n"
                 "  %s, %s, batch %d, %d epoch%s of %lld steps\n",
                 o.model.c_str(), static_cast<long long>(model->param_count()), model->fingerprint().c_str(),
                 data.source.c_str(), static_cast<long long>(order.size()), to_string(shard).c_str(),
                 to_string(partition).c_str(), static_cast<long long>(data.test.count), load_s,
                 device.device.str().c_str(), device.reason.c_str(), where.c_str(), optimizer->name().c_str(),
                 schedule->describe().c_str(), o.batch, o.epochs, o.epochs == 1 ? "" : "s",
                 static_cast<long long>(steps_per_epoch));
    metrics.write({{"type", "start"},
                   {"model", o.model},
                   {"params", model->param_count()},
                   {"fingerprint", model->fingerprint()},
                   {"train_examples", order.size()},
                   {"test_examples", data.test.count},
                   {"batch", o.batch},
                   {"epochs", o.epochs},
                   {"device", device.device.str()},
                   {"threads", threads},
                   {"seed", o.seed},
                   {"optimizer", optimizer->name()},
                   {"lr_schedule", schedule->describe()}});

    g_interrupted.store(false);
    auto old_int = std::signal(SIGINT, on_interrupt);
    auto old_term = std::signal(SIGTERM, on_interrupt);

    Rng shuffle_rng(o.seed ^ 0x5eed5eed5eed5eedULL);
    ProgressLine progress(o.progress_interval_s);
    const auto t_start = Clock::now();
    double train_s = 0;
    double last_test_acc = 0;
    BatchStats epoch_so_far;
    auto epoch_started = Clock::now();
    TrainingPosition position;

    TrainingHooks hooks;
    hooks.epoch_order = [&](std::int64_t) -> const std::vector<std::int64_t>& {
      shuffle_rng.shuffle(order.begin(), order.end());
      epoch_so_far = {};
      epoch_started = Clock::now();
      return order;
    };
    hooks.should_stop = [] { return g_interrupted.load(); };
    hooks.after_gradients = [&](const BatchStats& s, std::chrono::nanoseconds) {
      if (!std::isfinite(s.loss_sum))
        throw std::runtime_error("loss became " + std::to_string(s.loss_sum) + " at step " +
                                 std::to_string(position.step + 1) + ": lower --lr");
    };
    hooks.after_step = [&](const StepReport& r) {
      epoch_so_far += r.stats;
      char line[256];
      const double rate = static_cast<double>(epoch_so_far.count) / seconds_since(epoch_started);
      std::snprintf(line, sizeof line, "epoch %lld/%d  step %lld/%lld  loss %.4f  %.0f samples/s",
                    static_cast<long long>(r.position.epoch), o.epochs,
                    static_cast<long long>(r.position.epoch_step), static_cast<long long>(steps_per_epoch),
                    r.stats.mean_loss(), rate);
      progress.update(line);
    };
    hooks.after_epoch = [&](const EpochReport& e) {
      train_s += e.train_seconds;
      const BatchStats test = session->evaluate();
      last_test_acc = test.accuracy();
      progress.clear();
      print_epoch(e, o.epochs, static_cast<std::int64_t>(order.size()), test);
      metrics.write({{"type", "epoch"},
                     {"time_s", seconds_since(t_start)},
                     {"epoch", e.epoch},
                     {"step", position.step},
                     {"loss", e.train.mean_loss()},
                     {"train_acc", e.train.accuracy()},
                     {"test_loss", test.mean_loss()},
                     {"test_acc", test.accuracy()},
                     {"samples_per_s", static_cast<double>(e.train.count) / e.train_seconds},
                     {"examples", e.train.count},
                     {"complete", e.complete}});
    };
    run_training(*session, *schedule, o.epochs, o.batch, position, hooks);

    std::signal(SIGINT, old_int);
    std::signal(SIGTERM, old_term);
    const bool interrupted = g_interrupted.load();
    metrics.write({{"type", "final"},
                   {"time_s", seconds_since(t_start)},
                   {"train_s", train_s},
                   {"step", position.step},
                   {"test_acc", last_test_acc},
                   {"interrupted", interrupted}});
    if (interrupted) {
      std::fprintf(stderr, "hearsay train: interrupted after step %lld\n",
                   static_cast<long long>(position.step));
      return 130;
    }
    std::printf("final test accuracy %.4f after %lld steps, %.1f s training\n", last_test_acc,
                static_cast<long long>(position.step), train_s);
    return 0;
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
