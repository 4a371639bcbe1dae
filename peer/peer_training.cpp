// PeerProcess: the training loop, what it reports, and its checkpoints.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <thread>

#include "base/log.hpp"
#include "base/atomic_file.hpp"
#include "gossip/network/emulation/compute_emulation.hpp"
#include "peer/peer_process.hpp"

namespace hearsay {

namespace {}  // namespace

// The loop, as pseudo-code would have it: every epoch, every batch of the shard: take a
// step (gradients, optimizer, mixing), report now and then, checkpoint now and then.
void PeerProcess::train() {
  metrics_file_.write({{"type", "start"},
                       {"peer", id_},
                       {"run", cfg_.network.run},
                       {"algo", cfg_.gossip.algo},
                       {"model", cfg_.train.model},
                       {"params", model_->param_count()},
                       {"fingerprint", model_->fingerprint()},
                       {"train_examples", data_.train.count},
                       {"batch", cfg_.train.batch},
                       {"epochs", cfg_.train.epochs},
                       {"seed", cfg_.train.seed},
                       {"resumed", resumed_},
                       {"pulled_from", pulled_ ? nlohmann::json(pulled_->from) : nlohmann::json(nullptr)},
                       {"start_step", position_.step}});
  interval_start_ = Clock::now();
  if (mixer_) mixer_->training_resumes();
  TrainingHooks hooks;
  hooks.epoch_order = [this](std::int64_t epoch) -> const std::vector<std::int64_t>& {
    return epoch_order(epoch);
  };
  hooks.should_stop = [this] { return stopping(); };
  hooks.after_gradients = [this](const BatchStats& s, std::chrono::nanoseconds took) {
    after_gradients(s, took);
  };
  hooks.update_mutex = &state_mutex_;
  hooks.after_update = [this](const StepReport& r) { after_update(r); };
  hooks.after_step = [this](const StepReport& r) { after_step(r); };
  hooks.after_epoch = [this](const EpochReport& e) { after_epoch(e); };
  run_training(*session_, *schedule_, cfg_.train.epochs, cfg_.train.batch, position_, hooks);
}

void PeerProcess::after_gradients(const BatchStats& s, std::chrono::nanoseconds took) {
  if (const double slowdown = slowdown_.load(); slowdown > 1 || cfg_.emulation.min_step_time.count() > 0) {
    // An emulated machine (compute_emulation.hpp): a slower one, or one of its own.
    const auto wait = emulation::emulated_compute_wait(took, cfg_.emulation.min_step_time, slowdown);
    std::this_thread::sleep_for(std::chrono::duration_cast<Clock::duration>(wait));
  }
  if (!std::isfinite(s.loss_sum)) {
    if (auto d = divergence_->observe(position_.step + 1, s.loss_sum, -1)) stop_diverged(*d);
    throw std::runtime_error(
        "the loss became " + std::to_string(s.loss_sum) + " at step " +
        std::to_string(position_.step + 1));  // not reached: a loss that is not finite diverges
  }
}

void PeerProcess::after_update(const StepReport& r) {
  ++steps_this_run_;
  interval_stats_ += r.stats;
  // Where the parameters are: on a GPU the mixer's arithmetic runs there.
  if (mixer_) mixer_->after_step(session_->parameters(), static_cast<std::uint64_t>(position_.step));
}

void PeerProcess::after_step(const StepReport&) {
  save_snapshot_if_due();
  log_interval(steps_this_run_ == 1);  // the first step's loss shows where this peer started
  if (!cfg_.checkpoint.dir.empty() && Clock::now() >= next_checkpoint_) save_checkpoint("periodic");
  rebuild_mixer_if_members_changed();
  pause_if_asked();
}

void PeerProcess::after_epoch(const EpochReport& e) {
  if (e.complete) evaluate_epoch(e.train_seconds);  // a stop mid-epoch saves and leaves without one
}

void PeerProcess::log_interval(bool force) {
  const auto now = Clock::now();
  const double elapsed = seconds(now - interval_start_);
  if (!force && elapsed < cfg_.output.log_every) return;
  PeerMetrics m;
  m.peer_id = id_;
  m.algo = cfg_.gossip.algo;
  m.time_s = seconds(now - started_);
  m.step = position_.step;
  m.epoch = std::min<std::int64_t>(position_.epoch, cfg_.train.epochs);
  m.loss = interval_stats_.mean_loss();
  m.train_acc = interval_stats_.accuracy();
  m.samples_per_s = elapsed > 0 ? static_cast<double>(interval_stats_.count) / elapsed : 0;
  if (mixer_)
    for (const auto& r : mixer_->algorithm().exchanges().drain())
      if (r.distance >= 0) interval_distances_.push_back(r.distance);
  fill_counters(m);
  double sum = 0;
  for (const double d : interval_distances_) sum += d;
  m.partner_distance =
      interval_distances_.empty() ? 0 : sum / static_cast<double>(interval_distances_.size());

  const auto diverged =
      interval_stats_.count > 0 ? divergence_->observe(m.step, m.loss, m.partner_distance) : std::nullopt;
  nlohmann::json line = to_json(m);
  line["exchanges_in_interval"] = interval_distances_.size();
  line["rounds"] = rounds_retired_ + (mixer_ ? mixer_->stats().rounds : 0);
  line["rounds_skipped"] = rounds_skipped_retired_ + (mixer_ ? mixer_->stats().rounds_skipped : 0);
  metrics_file_.write(line);
  {
    std::lock_guard lock(latest_mutex_);
    latest_ = m;
  }
  char text[256];
  std::snprintf(
      text, sizeof text,
      "epoch %lld/%d  step %lld  loss %.4f  acc %.3f  %.0f samples/s  %llu exchanges  distance %.3g  "
      "%lld members",
      static_cast<long long>(m.epoch), cfg_.train.epochs, static_cast<long long>(m.step), m.loss, m.train_acc,
      m.samples_per_s, static_cast<unsigned long long>(m.exchanges_ok), m.partner_distance,
      static_cast<long long>(m.live_members));
  if (interval_stats_.count > 0) progress_.update(text, true);
  interval_stats_ = {};
  interval_distances_.clear();
  interval_start_ = now;
  if (diverged) stop_diverged(*diverged);
}

void PeerProcess::stop_diverged(const Divergence& d) {
  progress_.clear();
  metrics_file_.write({{"type", "diverged"},
                       {"peer", id_},
                       {"time_s", seconds(Clock::now() - started_)},
                       {"step", d.step},
                       {"began_at_step", d.began_at},
                       {"what", d.what}});
  throw TrainingDiverged(d);
}

void PeerProcess::evaluate_epoch(double epoch_seconds) {
  const BatchStats test = session_->evaluate();
  {
    std::lock_guard lock(latest_mutex_);
    last_test_acc_ = test.accuracy();
    last_test_loss_ = test.mean_loss();
  }
  progress_.clear();
  std::printf("epoch %lld/%d  step %lld  test loss %.4f  test acc %.4f  %.1f s\n",
              static_cast<long long>(position_.epoch), cfg_.train.epochs,
              static_cast<long long>(position_.step), test.mean_loss(), test.accuracy(), epoch_seconds);
  std::fflush(stdout);
  metrics_file_.write({{"type", "epoch"},
                       {"peer", id_},
                       {"time_s", seconds(Clock::now() - started_)},
                       {"epoch", position_.epoch},
                       {"step", position_.step},
                       {"test_loss", test.mean_loss()},
                       {"test_acc", test.accuracy()},
                       {"epoch_s", epoch_seconds}});
}

void PeerProcess::save_checkpoint(const char* why) {
  const auto& c = cfg_.checkpoint;
  if (c.dir.empty()) return;
  next_checkpoint_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(c.every);
  try {
    // Everything mixed so far belongs in the saved parameters.
    {
      std::lock_guard lock(state_mutex_);
      if (mixer_) mixer_->flush(session_->parameters());
      session_->params_to_host();  // on a GPU: the host copy the checkpoint saves
      session_->optimizer_state_to_host();
    }
    TrainingState state;
    state.step = position_.step;
    state.epoch = position_.epoch;
    state.epoch_step = position_.epoch_step;
    state.seed = cfg_.train.seed;
    // The data order is replayed from this seed and the epoch; partner choices are
    // random by design and start afresh after a resume.
    state.rng_state = {data_seed_};
    save_optimizer_state(*optimizer_, state);
    state.extra = {{"peer", id_}, {"run", cfg_.network.run}, {"algo", cfg_.gossip.algo}};
    write_checkpoint(checkpoint_path(c.dir), *model_, state);
    ++checkpoints_written_;
    logging::debug(std::string(why) + " checkpoint at step " + std::to_string(position_.step));
  } catch (const std::exception& e) {
    // The previous checkpoint is still there; training goes on and the next one retries.
    logging::error(std::string("could not write the ") + why + " checkpoint: " + e.what());
  }
}

void PeerProcess::save_snapshot_if_due() {
  const double every = cfg_.checkpoint.snapshot_every;
  if (every <= 0) return;
  // Snapshot K is taken right after step round(K * every * steps per epoch): a fixed
  // step, whatever the timing, so two runs with the same seed snapshot the same state.
  const auto step_of = [&](std::int64_t k) {
    return static_cast<std::int64_t>(std::llround(static_cast<double>(k) * every * steps_per_epoch_));
  };
  while (step_of(next_snapshot_) < position_.step) ++next_snapshot_;  // resumed past some
  if (step_of(next_snapshot_) != position_.step) return;
  const std::int64_t k = next_snapshot_++;
  try {
    std::lock_guard lock(state_mutex_);
    if (mixer_) mixer_->flush(session_->parameters());
    session_->params_to_host();
    const auto p = model_->params();
    write_file_atomically(
        std::filesystem::path(cfg_.checkpoint.dir) / ("params-" + std::to_string(k) + ".f32"),
        std::string_view(reinterpret_cast<const char*>(p.data()), p.size_bytes()));
  } catch (const std::exception& e) {
    logging::error("could not write parameter snapshot " + std::to_string(k) + ": " + e.what());
  }
}

void PeerProcess::write_final_record() {
  // A peer resumed from a checkpoint that had finished its epochs trains nothing: its final
  // accuracy is the checkpoint's, measured now (it printed -1 for want of an epoch's end).
  const bool nothing_trained = !stopping() && last_test_acc_ < 0 && steps_this_run_ == 0;
  if (nothing_trained) {
    const BatchStats test = session_->evaluate();
    std::lock_guard lock(latest_mutex_);
    last_test_acc_ = test.accuracy();
    last_test_loss_ = test.mean_loss();
  }
  metrics_file_.write(
      {{"type", "final"},
       {"peer", id_},
       {"time_s", seconds(Clock::now() - started_)},
       {"step", position_.step},
       {"epoch", std::min<std::int64_t>(position_.epoch, cfg_.train.epochs)},
       {"test_acc", last_test_acc_ < 0 ? nlohmann::json(nullptr) : nlohmann::json(last_test_acc_)},
       {"checkpoints", checkpoints_written_},
       {"interrupted", stopping()}});
  if (stopping())
    std::fprintf(stderr, "hearsay peer %s: stopped at step %lld, said bye\n", id_.c_str(),
                 static_cast<long long>(position_.step));
  else
    std::printf("finished: %lld steps, final test accuracy %.4f%s\n", static_cast<long long>(position_.step),
                last_test_acc_,
                nothing_trained ? " (the checkpoint had finished its epochs: nothing left to train)" : "");
  std::fflush(stdout);
}

const std::vector<std::int64_t>& PeerProcess::epoch_order(std::int64_t epoch) {
  // The order of epoch e is the shard shuffled e times from one seed, so a resumed peer
  // rebuilds it from (seed, epoch) alone. Epoch after epoch that is one more shuffle;
  // only a jump (a resume, a pulled state) replays the shuffles from the start.
  if (order_epoch_ != epoch - 1) {
    order_.resize(static_cast<std::size_t>(data_.train.count));  // data_.train is this peer's shard
    std::iota(order_.begin(), order_.end(), std::int64_t{0});
    order_rng_ = Rng(data_seed_);
    for (std::int64_t e = 1; e < epoch; ++e) order_rng_.shuffle(order_.begin(), order_.end());
  }
  order_rng_.shuffle(order_.begin(), order_.end());
  order_epoch_ = epoch;
  return order_;
}

}  // namespace hearsay
