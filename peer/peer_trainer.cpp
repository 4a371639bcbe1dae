// PeerTrainer: loading, resuming, the training loop, what it reports, and its checkpoints.
#include "peer/peer_trainer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <thread>

#include <unistd.h>

#include "base/atomic_file.hpp"
#include "base/log.hpp"
#include "gossip/network/emulation/compute_emulation.hpp"
#include "kernels/cpu/gemm.hpp"
#include "model/checkpoint.hpp"
#include "model/data/partition.hpp"
#include "model/zoo.hpp"
#include "peer/peer_errors.hpp"

namespace hearsay {

namespace {

// ---- the checkpoint directory ----------------------------------------------------------------

// Creates --checkpoint DIR and takes its lock (DIR/.lock, which names the holder), then
// removes what an interrupted write left there.
std::optional<FileLock> lock_checkpoint_directory(const std::string& dir, const std::string& id) {
  if (dir.empty()) return std::nullopt;
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw std::runtime_error("cannot create the checkpoint directory '" + dir +
                             "': " + (ec ? ec.message() : "a file of that name is in the way"));
  const fs::path lock_file = fs::path(dir) / kCheckpointLockFile;
  auto lock = FileLock::try_lock(lock_file, "pid " + std::to_string(::getpid()) + ", peer '" + id + "' on " +
                                                this_host_name());
  if (!lock) {
    const std::string holder = FileLock::holder_note(lock_file);
    throw PeerStartError("the checkpoint directory '" + dir + "' is in use by another running peer" +
                         (holder.empty() ? "" : " (" + holder + ")") +
                         ": give each peer its own --checkpoint directory (hearsay peer expands {rank} and "
                         "{id}: --checkpoint 'ckpt-{rank}'; scripts/launch does it for you)");
  }
  // Nobody else writes here: a temporary file is what a write cut short by a crash left.
  int removed = 0;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > 1 && name[0] == '.' && name.find(".tmp-") != std::string::npos) {
      std::error_code ignored;
      removed += fs::remove(it->path(), ignored) ? 1 : 0;
    }
  }
  if (removed > 0)
    logging::info("removed " + std::to_string(removed) + " temporary file(s) from '" + dir +
                  "' that a checkpoint write cut short left behind");
  return lock;
}

}  // namespace

PeerTrainer::PeerTrainer(const PeerConfig& cfg, std::string id, const std::atomic<bool>& stop,
                         Clock::time_point started)
    : cfg_(cfg),
      id_(std::move(id)),
      stop_(stop),
      started_(started),
      metrics_file_(cfg.output.metrics),
      checkpoint_lock_(lock_checkpoint_directory(cfg.checkpoint.dir, id_)),
      progress_(cfg.output.log_every),
      slowdown_(cfg.emulation.slowdown) {
  load_data_and_model();
}


// ---- setting up ----------------------------------------------------------------------------

void PeerTrainer::load_data_and_model() {
  const auto& t = cfg_.train;
  const auto& n = cfg_.network;
  const std::string dir = resolve_data_dir(t.data);
  const ShardSpec shard = n.rank >= 0 ? ShardSpec{n.rank, n.world} : ShardSpec{};
  const PartitionSpec partition = parse_partition(t.partition);
  // Only this peer's shard is kept, so data_.train is the shard itself, in shard order: N peers on
  // one box hold the training set once between them, not N times.
  std::int64_t train_set = 0;
  data_ = load_mnist_format(dir, [&](const Dataset& all) {
    train_set = all.count;
    return shard_indices(all, shard, partition, t.seed);
  });
  model_ = make_model(t.model);
  model_->init(init_seed(t));
  divergence_.emplace(model_->classes());
  if (data_.train.pixels() != model_->input_floats())
    throw std::runtime_error("the images in " + data_.source + " have " +
                             std::to_string(data_.train.pixels()) + " pixels, model '" + t.model +
                             "' expects " + std::to_string(model_->input_floats()));
  if (data_.train.count == 0)
    throw std::runtime_error("shard " + to_string(shard) + " of the training set is empty");
  RunPlan plan = plan_run(cfg_, id_, data_.train.count, train_set, !cfg_.emulation.control_file.empty());
  order_ = std::move(plan.order);
  steps_per_epoch_ = plan.steps_per_epoch;
  total_steps_ = plan.budget->planned_steps();
  run_progress_ = std::move(plan.progress);
  shard_share_ = plan.shard_share;
  budget_ = std::move(plan.budget);
  schedule_ = std::move(plan.schedule);
  optimizer_ = make_optimizer(optimizer_settings(cfg_), static_cast<std::size_t>(model_->param_count()));
  cpu::set_blas_threads(1);  // parallelism is over the batch, one BLAS thread per compute thread
  const int threads = t.threads > 0 ? t.threads : usable_cores();
  // A fixed rank is this peer's local rank too unless the launcher says otherwise.
  device_ = choose_device(parse_device(t.device), local_rank_from_environment(std::max(n.rank, 0)));
  session_ = make_training_session(device_.device, *model_, *optimizer_,
                                   {threads, t.batch, cfg_.mixing.bn_stats == "mix"});
  session_->bind_data(data_.train, data_.test);
  const std::string where =
      device_.device.is_cuda()
          ? device_.device.str() + " (" + device_.reason + "): " + session_->backend().describe()
          : std::to_string(threads) + " compute thread" + (threads == 1 ? "" : "s");
  std::fprintf(
      stderr,
      "hearsay peer %s: %s (%lld parameters, fingerprint %s), %s: %lld train examples (shard %s, %s), "
      "%lld test; %s, %s, batch %d, %s epoch%s of %lld steps\n",
      id_.c_str(), t.model.c_str(), static_cast<long long>(model_->param_count()),
      model_->fingerprint().c_str(), data_.source.c_str(), static_cast<long long>(data_.train.count),
      to_string(shard).c_str(), t.partition.c_str(), static_cast<long long>(data_.test.count), where.c_str(),
      schedule_->describe().c_str(), t.batch, epochs_text(t.epochs).c_str(), t.epochs == 1 ? "" : "s",
      static_cast<long long>(steps_per_epoch_));
}

void PeerTrainer::resume_from_checkpoint() {
  const auto& c = cfg_.checkpoint;
  if (c.dir.empty()) return;
  next_checkpoint_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(c.every);
  if (!c.resume) return;
  const auto path = checkpoint_path(c.dir);
  if (!std::filesystem::exists(path)) {
    logging::warn("--resume: no checkpoint in '" + c.dir + "' yet; starting without one");
    return;
  }
  const TrainingState state = read_checkpoint(path, *model_);
  // A fixed rank trains its own shard: another rank's state is not this peer's to go on from.
  const auto writer = state.extra.find("peer");
  if (writer != state.extra.end() && writer->second != id_ && is_rank_peer_id(writer->second) &&
      is_rank_peer_id(id_))
    throw PeerStartError("the checkpoint " + path.string() + " was written by peer '" + writer->second +
                         "', this peer is '" + id_ +
                         "': give each rank its own --checkpoint directory (--checkpoint 'ckpt-{rank}')");
  if (state.seed != cfg_.train.seed)
    throw PeerStartError("the checkpoint " + path.string() + " was written with --seed " +
                         std::to_string(state.seed) + ", this peer has --seed " +
                         std::to_string(cfg_.train.seed) +
                         ": resume with the seed of the run (it fixes the data order)");
  if (state.rng_state.size() == 1 && state.rng_state[0] != order_->seed())
    logging::warn("the checkpoint " + path.string() +
                  " was written by a peer with another id: this peer's data order differs from the one it "
                  "resumes (harmless for training, but not an exact resume)");
  restore_optimizer_state(state, *optimizer_);
  params_changed_on_host();
  session_->optimizer_state_from_host();
  position_.step = state.step;
  position_.epoch = state.epoch;
  position_.epoch_step = state.epoch_step;
  resumed_ = true;
  logging::info("resumed from " + path.string() + " at step " + std::to_string(position_.step) + " (epoch " +
                std::to_string(position_.epoch) + ", batch " + std::to_string(position_.epoch_step) + ")");
}

void PeerTrainer::adopt(PulledState pulled, Adopt how) {
  if (pulled.state.step == 0) return;  // the run has not started: everyone starts from --seed
  std::lock_guard lock(state_mutex_);
  std::ranges::copy(pulled.state.params, model_->state().begin());
  auto opt = optimizer_->state();
  if (pulled.state.optimizer_state.size() == opt.size())
    std::ranges::copy(pulled.state.optimizer_state, opt.begin());
  // Join the run where it is, so the learning-rate schedule agrees with the others'.
  const auto last = how == Adopt::leave_last_epoch ? total_steps_ - steps_per_epoch_ : total_steps_;
  position_.step = std::min<std::int64_t>(static_cast<std::int64_t>(pulled.state.step), last);
  optimizer_->set_steps_taken(position_.step);
  params_changed_on_host();
  session_->optimizer_state_from_host();
  position_.epoch = position_.step / steps_per_epoch_ + 1;
  position_.epoch_step = position_.step % steps_per_epoch_;
  logging::info("started from the training state of '" + pulled.from + "' at step " +
                std::to_string(pulled.state.step) + " (this peer: epoch " + std::to_string(position_.epoch) +
                ", step " + std::to_string(position_.step) + ")");
  pulled_ = std::move(pulled);
}

// ---- what other threads see ------------------------------------------------------------------

TrainingSnapshot PeerTrainer::snapshot_for_neighbour() {
  std::lock_guard lock(state_mutex_);
  TrainingSnapshot s;
  // On a GPU the parameters and the optimizer's state live there: fetch them first.
  session_->params_to_host();
  session_->optimizer_state_to_host();
  s.params.assign(model_->state().begin(), model_->state().end());  // buffers included
  const auto opt = optimizer_->state();
  s.optimizer_state.assign(opt.begin(), opt.end());
  s.step = static_cast<std::uint64_t>(position_.step);
  return s;
}

StatusServer::Snapshot PeerTrainer::status() {
  StatusServer::Snapshot s;
  {
    std::lock_guard lock(latest_mutex_);
    s.metrics = latest_;
    s.status = {
        {"run", cfg_.network.run},
        {"epochs", epochs_json(cfg_.train.epochs)},
        {"test_acc", last_test_acc_ < 0 ? nlohmann::json(nullptr) : nlohmann::json(last_test_acc_)},
        {"test_loss", last_test_loss_ < 0 ? nlohmann::json(nullptr) : nlohmann::json(last_test_loss_)}};
  }
  // As they are now, not as of the last log interval (a scrape 3 s into a run said uptime
  // 0.26 s and step 1; hearsay watch showed epoch 1 at epoch 5); the loss, accuracy, rate
  // and distance are the last interval's.
  s.metrics.peer_id = id_;
  s.metrics.algo = cfg_.mixing.algo;
  s.metrics.time_s = seconds(Clock::now() - started_);
  s.metrics.checkpoints_written = checkpoints_written_.load();
  s.metrics.checkpoint_failures = checkpoint_failures_.load();
  std::lock_guard lock(state_mutex_);
  s.metrics.step = position_.step;
  s.metrics.epoch = std::min<std::int64_t>(position_.epoch, epochs_started(cfg_.train.epochs));
  return s;
}

void PeerTrainer::flush_mixing() {
  if (!links_.mixer) return;
  std::lock_guard lock(state_mutex_);
  links_.mixer->flush(session_->parameters());
}

void PeerTrainer::flush_mixing_at_end() {
  progress_.clear();
  try {
    flush_mixing();
  } catch (const std::exception& e) {
    logging::warn(std::string("last mixing round failed: ") + e.what());
  }
}

// ---- training ----------------------------------------------------------------------------------

// The loop, as pseudo-code would have it: every epoch, every batch of the shard: take a
// step (gradients, optimizer, mixing), report now and then, checkpoint now and then.
void PeerTrainer::train() {
  metrics_file_.write({{"type", "start"},
                       {"peer", id_},
                       {"run", cfg_.network.run},
                       {"algo", cfg_.mixing.algo},
                       {"model", cfg_.train.model},
                       {"params", model_->param_count()},
                       {"fingerprint", model_->fingerprint()},
                       {"train_examples", data_.train.count},
                       {"epoch_examples", order_->per_epoch()},
                       {"batch", cfg_.train.batch},
                       {"epochs", epochs_json(cfg_.train.epochs)},
                       {"seed", cfg_.train.seed},
                       {"resumed", resumed_},
                       {"pulled_from", pulled_ ? nlohmann::json(pulled_->from) : nlohmann::json(nullptr)},
                       {"start_step", position_.step},
                       {"settings", settings_record(cfg_)}});
  interval_start_ = Clock::now();
  if (links_.mixer) links_.mixer->training_resumes();
  TrainingHooks hooks;
  hooks.epoch_order = [this](std::int64_t epoch) -> const std::vector<std::int64_t>& {
    return epoch_order(epoch);
  };
  hooks.should_stop = [this] { return stopping() || budget_->ended(); };
  hooks.after_gradients = [this](const BatchStats& s, std::chrono::nanoseconds took) {
    after_gradients(s, took);
  };
  hooks.update_mutex = &state_mutex_;
  hooks.after_update = [this](const StepReport& r) { after_update(r); };
  hooks.after_step = [this](const StepReport& r) { after_step(r); };
  hooks.after_epoch = [this](const EpochReport& e) { after_epoch(e); };
  budget_->started(transport::ProgressEstimate::Clock::now());
  const auto began = Clock::now();
  run_training(*session_, *schedule_, budget_->loop_epochs(), cfg_.train.batch, position_, hooks);
  // A budget ends the run mid-epoch, and --epoch-eval false skips the epochs' ends: the
  // final parameters are evaluated all the same.
  if (!stopping() && steps_this_run_ > 0 && evaluated_step_ != position_.step)
    evaluate_epoch(seconds(Clock::now() - began));
  if (!budget_->ended() && !stopping()) budget_->end(RunBudget::End::epochs);
}

void PeerTrainer::after_gradients(const BatchStats& s, std::chrono::nanoseconds took) {
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

void PeerTrainer::after_update(const StepReport& r) {
  ++steps_this_run_;
  interval_stats_ += r.stats;
  // Where the parameters are: on a GPU the mixer's arithmetic runs there.
  if (links_.mixer)
    links_.mixer->after_update(session_->parameters(), static_cast<std::uint64_t>(position_.step));
}

void PeerTrainer::after_step(const StepReport&) {
  budget_->after_step(position_.step, transport::ProgressEstimate::Clock::now());
  save_snapshot_if_due();
  log_interval(steps_this_run_ == 1);  // the first step's loss shows where this peer started
  if (!cfg_.checkpoint.dir.empty() && cfg_.checkpoint.every > Duration::zero() && Clock::now() >= next_checkpoint_)
    save_checkpoint("periodic");
  if (links_.after_step) links_.after_step();
}

void PeerTrainer::after_epoch(const EpochReport& e) {
  // A stop mid-epoch saves and leaves without one; without --epoch-eval, train() evaluates at the end.
  if (e.complete && cfg_.output.epoch_eval) evaluate_epoch(e.train_seconds);
}

void PeerTrainer::log_interval(bool force) {
  const auto now = Clock::now();
  const double elapsed = seconds(now - interval_start_);
  if (!force && elapsed < cfg_.output.log_every) return;
  PeerMetrics m;
  m.peer_id = id_;
  m.algo = cfg_.mixing.algo;
  m.time_s = seconds(now - started_);
  m.step = position_.step;
  m.epoch = std::min<std::int64_t>(position_.epoch, epochs_started(cfg_.train.epochs));
  m.loss = interval_stats_.mean_loss();
  m.train_acc = interval_stats_.accuracy();
  m.samples_per_s = elapsed > 0 ? static_cast<double>(interval_stats_.count) / elapsed : 0;
  m.checkpoints_written = checkpoints_written_.load();
  m.checkpoint_failures = checkpoint_failures_.load();
  const std::vector<double> distances =
      links_.mixer ? links_.mixer->drain_distances() : std::vector<double>{};
  if (links_.counters) links_.counters(m);
  double sum = 0;
  for (const double d : distances) sum += d;
  m.partner_distance = distances.empty() ? 0 : sum / static_cast<double>(distances.size());

  const auto diverged =
      interval_stats_.count > 0 ? divergence_->observe(m.step, m.loss, m.partner_distance) : std::nullopt;
  nlohmann::json line = to_json(m);
  const MixerHost::Totals mixed = links_.mixer ? links_.mixer->totals() : MixerHost::Totals{};
  line["exchanges_in_interval"] = distances.size();
  line["rounds"] = mixed.rounds;
  line["rounds_skipped"] = mixed.rounds_skipped;
  metrics_file_.write(line);
  {
    std::lock_guard lock(latest_mutex_);
    latest_ = m;
  }
  char text[256];
  std::snprintf(
      text, sizeof text,
      "epoch %lld/%s  step %lld  loss %.4f  acc %.3f  %.0f samples/s  %llu exchanges  distance %.3g  "
      "%lld members",
      static_cast<long long>(m.epoch), epochs_text(cfg_.train.epochs).c_str(), static_cast<long long>(m.step),
      m.loss, m.train_acc, m.samples_per_s, static_cast<unsigned long long>(m.exchanges_ok),
      m.partner_distance, static_cast<long long>(m.live_members));
  if (interval_stats_.count > 0) progress_.update(text, true);
  interval_stats_ = {};
  interval_start_ = now;
  if (diverged) stop_diverged(*diverged);
}

void PeerTrainer::stop_diverged(const Divergence& d) {
  progress_.clear();
  metrics_file_.write({{"type", "diverged"},
                       {"peer", id_},
                       {"time_s", seconds(Clock::now() - started_)},
                       {"step", d.step},
                       {"began_at_step", d.began_at},
                       {"what", d.what}});
  throw TrainingDiverged(d);
}

void PeerTrainer::evaluate_epoch(double epoch_seconds) {
  const BatchStats test = session_->evaluate();
  evaluated_step_ = position_.step;
  {
    std::lock_guard lock(latest_mutex_);
    last_test_acc_ = test.accuracy();
    last_test_loss_ = test.mean_loss();
  }
  progress_.clear();
  std::printf("epoch %lld/%s  step %lld  test loss %.4f  test acc %.4f  %.1f s\n",
              static_cast<long long>(position_.epoch), epochs_text(cfg_.train.epochs).c_str(),
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

void PeerTrainer::save_checkpoint(const char* why) {
  const auto& c = cfg_.checkpoint;
  if (c.dir.empty()) return;
  next_checkpoint_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(c.every);
  try {
    // Everything mixed so far belongs in the saved parameters.
    {
      std::lock_guard lock(state_mutex_);
      if (links_.mixer) links_.mixer->flush(session_->parameters());
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
    state.rng_state = {order_->seed()};
    save_optimizer_state(*optimizer_, state);
    state.extra = {{"peer", id_}, {"run", cfg_.network.run}, {"algo", cfg_.mixing.algo}};
    write_checkpoint(checkpoint_path(c.dir), *model_, state);
    ++checkpoints_written_;
    logging::debug(std::string(why) + " checkpoint at step " + std::to_string(position_.step));
  } catch (const std::exception& e) {
    // The previous checkpoint is still there; training goes on and the next one retries.
    ++checkpoint_failures_;
    logging::error(std::string("could not write the ") + why +
                   " checkpoint (the previous one stays): " + e.what());
  }
}

void PeerTrainer::save_snapshot_if_due() {
  const auto due =
      snapshot_due(next_snapshot_, cfg_.checkpoint.snapshot_every, steps_per_epoch_, position_.step);
  if (!due) return;
  const std::int64_t k = *due;
  try {
    std::lock_guard lock(state_mutex_);
    if (links_.mixer) links_.mixer->flush(session_->parameters());
    session_->params_to_host();
    const auto p = model_->state();
    write_file_atomically(
        std::filesystem::path(cfg_.checkpoint.dir) / ("params-" + std::to_string(k) + ".f32"),
        std::string_view(reinterpret_cast<const char*>(p.data()), p.size_bytes()));
  } catch (const std::exception& e) {
    logging::error("could not write parameter snapshot " + std::to_string(k) + ": " + e.what());
  }
}

void PeerTrainer::write_final_record() {
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
       {"epoch", budget_->global()
                     ? position_.epoch
                     : std::min<std::int64_t>(position_.epoch, epochs_started(cfg_.train.epochs))},
       {"test_acc", last_test_acc_ < 0 ? nlohmann::json(nullptr) : nlohmann::json(last_test_acc_)},
       {"checkpoints", checkpoints_written_.load()},
       {"checkpoint_failures", checkpoint_failures_.load()},
       {"ended_by", to_string(budget_->why())},
       {"lr", schedule_->at(position_.step)},
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

const std::vector<std::int64_t>& PeerTrainer::epoch_order(std::int64_t epoch) { return order_->of(epoch); }

}  // namespace hearsay
