// ExternalRecords: an external peer's metrics, snapshots and checkpoints (external_records.hpp).
#include "peer/external_records.hpp"

#include <cmath>
#include <filesystem>

#include "base/atomic_file.hpp"
#include "base/log.hpp"
#include "model/checkpoint.hpp"
#include "peer/layout_checkpoint.hpp"
#include "peer/peer_errors.hpp"
#include "peer/training_flags.hpp"

namespace hearsay {

namespace fs = std::filesystem;

ExternalRecords::ExternalRecords(const PeerConfig& cfg, std::string id, ModelLayout layout,
                                 ModelIdentity identity, Clock::time_point started)
    : cfg_(cfg),
      id_(std::move(id)),
      layout_(std::move(layout)),
      fingerprint_(std::move(identity.fingerprint)),
      zoo_(std::move(identity.zoo)),
      started_(started),
      metrics_(cfg.output.metrics),
      next_checkpoint_(Clock::now() + std::chrono::duration_cast<Clock::duration>(cfg.checkpoint.every)) {
  if (!cfg_.checkpoint.dir.empty()) fs::create_directories(cfg_.checkpoint.dir);
}

std::optional<std::int64_t> ExternalRecords::resume(std::span<float> params) {
  const auto& c = cfg_.checkpoint;
  if (!c.resume || c.dir.empty()) return std::nullopt;
  const auto path = checkpoint_path(c.dir);
  if (!fs::exists(path)) {
    logging::warn("--resume: no checkpoint in '" + c.dir + "' yet; starting without one");
    return std::nullopt;
  }
  std::string writer;
  std::uint64_t seed = 0;
  std::int64_t step = 0;
  if (zoo_) {
    const TrainingState state = read_checkpoint(path, *zoo_);
    const auto found = state.extra.find("peer");
    writer = found != state.extra.end() ? found->second : id_;
    seed = state.seed;
    step = state.step;
  } else {
    std::vector<float> values(params.size());
    const LayoutCheckpointState state = read_layout_checkpoint(path, layout_, fingerprint_, values);
    writer = state.peer;
    seed = state.seed;
    step = state.step;
    if (writer == id_ && seed == cfg_.train.seed) std::copy(values.begin(), values.end(), params.begin());
  }
  if (writer != id_)
    throw PeerStartError("the checkpoint " + path.string() + " was written by peer '" + writer +
                         "', this peer is '" + id_ + "': give each rank its own --checkpoint directory");
  if (seed != cfg_.train.seed)
    throw PeerStartError("the checkpoint " + path.string() + " was written with --seed " +
                         std::to_string(seed) + ", this peer has --seed " + std::to_string(cfg_.train.seed));
  if (zoo_) {
    const auto s = zoo_->state();
    std::copy(s.begin(), s.end(), params.begin());
  }
  logging::info("resumed from " + path.string() + " at step " + std::to_string(step));
  return step;
}

void ExternalRecords::write(nlohmann::json record) { metrics_.write(record); }

void ExternalRecords::start_record(const std::string& fingerprint, std::int64_t params, std::int64_t shard,
                                   std::int64_t steps_per_epoch, std::int64_t start_step) {
  write({{"type", "start"},
         {"peer", id_},
         {"run", cfg_.network.run},
         {"algo", cfg_.mixing.algo},
         {"model", zoo_ ? zoo_->name() : std::string("torch")},
         {"params", params},
         {"fingerprint", fingerprint},
         {"train_examples", shard},
         {"epoch_examples", shard},  // as a native peer: each epoch passes over the shard once
         {"batch", cfg_.train.batch},
         {"epochs", epochs_json(cfg_.train.epochs)},
         {"seed", cfg_.train.seed},
         {"resumed", start_step > 0},
         {"pulled_from", nullptr},
         {"start_step", start_step},
         {"external", true},
         {"settings", settings_record(cfg_)}});
  steps_per_epoch_ = steps_per_epoch;
  interval_start_ = Clock::now();
}

void ExternalRecords::after_step(std::int64_t step, std::optional<double> loss,
                                 const std::function<void(PeerMetrics&)>& counters, bool force) {
  if (!force) ++interval_steps_;
  if (loss) {
    interval_loss_sum_ += *loss;  // a loss that is not finite makes the mean so: a divergence
    ++interval_losses_;
  }
  const auto now = Clock::now();
  const double elapsed = seconds(now - interval_start_);
  if (!force && !first_ && elapsed < cfg_.output.log_every) return;
  first_ = false;
  PeerMetrics m;
  m.peer_id = id_;
  m.algo = cfg_.mixing.algo;
  m.time_s = seconds(now - started_);
  m.step = step;
  m.epoch = steps_per_epoch_ > 0 ? (step - 1) / steps_per_epoch_ + 1 : 1;
  m.checkpoints_written = checkpoints_written_;
  m.checkpoint_failures = checkpoint_failures_;
  if (counters) counters(m);
  nlohmann::json line = to_json(m);
  // What the caller did not say is not made up: no loss given, no loss written (JSON has
  // no NaN: a mean that is not finite is written null, as a native peer writes it).
  line.erase("loss");
  if (interval_losses_ > 0) {
    const double mean = interval_loss_sum_ / static_cast<double>(interval_losses_);
    line["loss"] = std::isfinite(mean) ? nlohmann::json(mean) : nlohmann::json(nullptr);
  }
  line.erase("train_acc");
  m.samples_per_s = elapsed > 0 ? static_cast<double>(interval_steps_ * cfg_.train.batch) / elapsed : 0.0;
  if (interval_losses_ > 0) m.loss = interval_loss_sum_ / static_cast<double>(interval_losses_);
  {
    std::lock_guard lock(latest_mutex_);
    latest_ = m;
  }
  line["samples_per_s"] =
      elapsed > 0 ? static_cast<double>(interval_steps_ * cfg_.train.batch) / elapsed : 0.0;
  metrics_.write(line);
  interval_steps_ = interval_losses_ = 0;
  interval_loss_sum_ = 0;
  interval_start_ = now;
}

PeerMetrics ExternalRecords::latest() const {
  std::lock_guard lock(latest_mutex_);
  return latest_;
}

void ExternalRecords::snapshot_if_due(std::int64_t step, std::int64_t steps_per_epoch,
                                      std::span<const float> params, const std::function<void()>& flush) {
  const auto due = snapshot_due(next_snapshot_, cfg_.checkpoint.snapshot_every, steps_per_epoch, step);
  if (!due || cfg_.checkpoint.dir.empty()) return;
  try {
    if (flush) flush();
    write_file_atomically(
        fs::path(cfg_.checkpoint.dir) / ("params-" + std::to_string(*due) + ".f32"),
        std::string_view(reinterpret_cast<const char*>(params.data()), params.size_bytes()));
  } catch (const std::exception& e) {
    logging::error("could not write parameter snapshot " + std::to_string(*due) + ": " + e.what());
  }
}

void ExternalRecords::checkpoint_if_due(std::int64_t step, std::int64_t steps_per_epoch,
                                        std::span<const float> params, bool final,
                                        const std::function<void()>& flush) {
  const auto& c = cfg_.checkpoint;
  if (c.dir.empty()) return;
  if (!final && (c.every <= Duration::zero() || Clock::now() < next_checkpoint_)) return;
  next_checkpoint_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(c.every);
  if (flush) flush();  // everything mixed so far belongs in the saved parameters
  try {
    if (zoo_ == nullptr) {
      write_layout_checkpoint(checkpoint_path(c.dir), layout_, params,
                              {fingerprint_, id_, cfg_.network.run, cfg_.mixing.algo, step, cfg_.train.seed});
    } else {
      const auto s = zoo_->state();
      std::copy(params.begin(), params.end(), s.begin());
      TrainingState state;
      state.step = step;
      state.epoch = steps_per_epoch > 0 ? step / steps_per_epoch + 1 : 1;
      state.epoch_step = steps_per_epoch > 0 ? step % steps_per_epoch : 0;
      state.seed = cfg_.train.seed;
      state.extra = {
          {"peer", id_}, {"run", cfg_.network.run}, {"algo", cfg_.mixing.algo}, {"trainer", "external"}};
      write_checkpoint(checkpoint_path(c.dir), *zoo_, state);
    }
    ++checkpoints_written_;
  } catch (const std::exception& e) {
    ++checkpoint_failures_;
    logging::error(std::string("checkpoint failed (the previous one stays): ") + e.what());
  }
}

void ExternalRecords::final_record(std::int64_t step, std::int64_t steps_per_epoch,
                                   const std::string& ended_by, double lr) {
  write({{"type", "final"},
         {"peer", id_},
         {"time_s", seconds_since_start()},
         {"step", step},
         {"epoch", steps_per_epoch > 0 ? step / steps_per_epoch : 0},
         {"test_acc", nullptr},
         {"checkpoints", checkpoints_written_},
         {"checkpoint_failures", checkpoint_failures_},
         {"ended_by", ended_by},
         {"lr", lr},
         {"interrupted", false}});
}

}  // namespace hearsay
