// ExternalPeer: a peer's network and mixer over a caller's buffer (external_peer.hpp).
#include "peer/external_peer.hpp"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "base/log.hpp"
#include "gossip/network/emulation/compute_emulation.hpp"
#include "peer/peer_errors.hpp"
#include "peer/ready_file.hpp"
#include "peer/state_transfer.hpp"

namespace hearsay {

PeerConfig parse_external_peer_settings(const std::vector<std::string>& args) {
  PeerConfig cfg;
  CLI::App app("hearsay peer (external)", "hearsay");
  add_peer_options(app, cfg);
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them last first
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    throw std::invalid_argument(app.help());
  } catch (const CLI::ParseError& e) {
    throw std::invalid_argument(e.what());
  }
  expand_per_peer_paths(cfg);
  validate(cfg);
  return cfg;
}

std::chrono::steady_clock::time_point ExternalPeer::process_start() {
  const auto now = std::chrono::steady_clock::now();
  // /proc/self/stat's 22nd field: the start in clock ticks after boot; /proc/uptime: now.
  std::ifstream stat("/proc/self/stat"), uptime("/proc/uptime");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  double up = 0;
  const auto close = text.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos || !(uptime >> up)) return now;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i)
    if (i == 22) {
      const double age = up - std::stod(field) / static_cast<double>(::sysconf(_SC_CLK_TCK));
      if (age < 0 || age > 365.0 * 86400) return now;
      return now - std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                       std::chrono::duration<double>(age));
    }
  return now;
}

ExternalPeer::ExternalPeer(PeerConfig cfg)
    : cfg_(std::move(cfg)),
      traits_(algorithms::find_algorithm(cfg_.mixing.algo)),
      id_(peer_id(cfg_)),
      slowdown_(cfg_.emulation.slowdown),
      mixer_(cfg_, traits_, id_, OptimizerOwner::caller) {}

ExternalPeer::~ExternalPeer() {
  try {
    close();
  } catch (const std::exception& e) {
    logging::warn(std::string("closing the peer: ") + e.what());
  }
  control_.reset();
  mixer_.stop();
  if (network_) network_->stop();
}

void ExternalPeer::attach(float* data, const CallerModel& model) {
  if (closed_) throw std::runtime_error("attach: the peer is closed; make a new one");
  if (store_) throw std::runtime_error("attach: the peer already has parameters; a peer takes one model");
  const std::int64_t count = layout_count(model.layout);
  if (data == nullptr) throw std::invalid_argument("attach: no parameters (an empty model)");
  if (model.shard_examples < 1 || model.train_examples < model.shard_examples)
    throw std::invalid_argument("attach: shard_examples (" + std::to_string(model.shard_examples) +
                                ") must be at least 1 and at most train_examples (" +
                                std::to_string(model.train_examples) + ")");
  ModelIdentity identity = identify_model(model.layout);
  fingerprint_ = identity.fingerprint;
  plan_ =
      plan_run(cfg_, id_, model.shard_examples, model.train_examples, !cfg_.emulation.control_file.empty());
  records_.emplace(cfg_, id_, model.layout, std::move(identity), started_);
  buffer_ = std::span<float>(data, static_cast<std::size_t>(count));
  store_.emplace(buffer_);
  tensors_ = mixed_tensors(model.layout, buffer_.size());
  try {
    std::vector<float> resumed(static_cast<std::size_t>(count));
    if (const auto step = records_->resume(resumed)) {
      store_->write(resumed);
      start_step_ = *step;
      last_step_ = static_cast<std::uint64_t>(*step);
    }
    connect();
    records_->start_record(fingerprint_, count, model.shard_examples, plan_.steps_per_epoch, start_step_);
    plan_.budget->started(transport::ProgressEstimate::Clock::now());
    last_step_end_ = std::chrono::steady_clock::now();
  } catch (...) {
    // Half a peer is no peer: its port is freed, and it can only be closed.
    closed_ = true;
    control_.reset();
    mixer_.stop();
    if (network_) network_->stop();  // its threads call the hooks, which use network_
    network_.reset();
    store_.reset();
    throw;
  }
}

void ExternalPeer::connect() {
  const std::size_t count = store_->size();
  network_ = std::make_unique<NetworkNode>(cfg_, id_, stop_, fingerprint_, static_cast<std::int64_t>(count));
  // Before the first message: every message carries this peer's steps (the run's progress).
  network_->transport().set_progress(plan_.progress);
  // Before anyone is greeted: the control file may block peers (a partition).
  if (!cfg_.emulation.control_file.empty())
    control_ = std::make_unique<emulation::ControlFileWatcher>(
        cfg_.emulation.control_file, [this](const emulation::PeerControl& c) { apply_control(c); },
        [](const std::string& why) { logging::warn("control file: " + why); });
  NetworkNode::Hooks hooks;
  // A late joiner that pulls a state (and the simulator's observer) gets the parameters as
  // they are (read without a lock, as a partner's average may be mid-update: a starting point).
  hooks.state = [this] {
    TrainingSnapshot s;
    s.params.assign(store_->size(), 0.0f);
    store_->read(s.params);
    s.step = last_step_.load();
    return s;
  };
  hooks.status = [this] { return status(); };
  hooks.members_changed = [this] { mixer_.members_changed(network_->membership()); };
  network_->start(std::move(hooks));
  logging::info("peer '" + id_ + "' of run '" + cfg_.network.run + "' listening at " +
                network_->advertised_address() + " (" + std::to_string(count) + " parameters, " +
                fingerprint_ + ")");
  write_ready_file(cfg_, id_, network_->advertised_address(), network_->http_port());
  network_->join_run();
  network_->wait_for_ranks(cfg_.checkpoint.resume);
  network_->wait_for_peers();
  if (!stop_.load()) pull_state_if_late();
  if (traits_ != nullptr) {  // --algo none: trains alone
    mixer_.start(network_->transport(), network_->membership(), last_step_.load(), *store_, plan_.shard_share,
                 tensors_);
    // Partners' first requests are answered from now on, not only after the first step.
    mixer_.flush(*store_);
  }
  wait_for_release();
}

// As PeerProcess::pull_state_if_late: a gossip peer joining a run under way goes on from a
// neighbour's parameters and step (the caller's optimizer state stays its own), keeping at
// least the last epoch to train; a restart without a checkpoint yet takes the step as it is.
void ExternalPeer::pull_state_if_late() {
  if (!pulls_state_when_joining(cfg_, start_step_ > 0)) return;
  auto pulled = pull_state(network_->transport(), network_->live_neighbours(), store_->size(),
                           std::chrono::seconds(10));
  if (!pulled) {
    logging::warn("no neighbour sent its training state; starting from the caller's parameters");
    return;
  }
  if (pulled->state.step == 0) return;  // the run has not started
  store_->write(pulled->state.params);
  const std::int64_t planned = plan_.budget->planned_steps();
  const std::int64_t last = cfg_.checkpoint.resume ? planned : planned - plan_.steps_per_epoch;
  start_step_ = std::clamp<std::int64_t>(static_cast<std::int64_t>(pulled->state.step), 0,
                                         std::max<std::int64_t>(last, 0));
  last_step_ = static_cast<std::uint64_t>(start_step_);
  logging::info("started from the training state of '" + pulled->from + "' at step " +
                std::to_string(pulled->state.step) + " (this peer: step " + std::to_string(start_step_) +
                ")");
}

void ExternalPeer::check_usable(const char* what) const {
  if (closed_)
    throw std::runtime_error(std::string(what) + ": the peer is closed (close() said bye to the run)");
  if (!store_) throw std::runtime_error(std::string(what) + ": no parameters yet; attach a model first");
}

bool ExternalPeer::after_step(std::uint64_t step, std::optional<double> loss) {
  check_usable("after_step");
  emulate_compute();
  last_step_ = step;
  const auto at = static_cast<std::int64_t>(step);
  plan_.budget->after_step(at, transport::ProgressEstimate::Clock::now());
  // A native peer's loop runs the budget's epochs and ends there (peer_trainer.cpp); the
  // caller's loop is endless, so the end of those epochs is said here.
  if (at >= plan_.budget->loop_epochs() * plan_.steps_per_epoch) plan_.budget->end(RunBudget::End::epochs);
  if (traits_ != nullptr) mixer_.after_update(*store_, step);
  const auto flush = [this] {
    if (traits_ != nullptr) mixer_.flush(*store_);
  };
  records_->snapshot_if_due(at, plan_.steps_per_epoch, buffer_, flush);
  records_->after_step(at, loss, [this](PeerMetrics& m) { fill_counters(m); });
  records_->checkpoint_if_due(at, plan_.steps_per_epoch, buffer_, false, flush);
  pause_if_asked(at);
  last_step_end_ = std::chrono::steady_clock::now();
  return !plan_.budget->ended() && !stop_.load();
}

double ExternalPeer::learning_rate(std::uint64_t step) const {
  if (!plan_.schedule) throw std::runtime_error("learning_rate: attach a model first");
  return plan_.schedule->at(static_cast<std::int64_t>(step));
}

void ExternalPeer::emulate_compute() {
  const double slowdown = slowdown_.load();
  if (slowdown <= 1 && cfg_.emulation.min_step_time.count() <= 0) return;
  const auto took =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - last_step_end_);
  const auto wait = emulation::emulated_compute_wait(took, cfg_.emulation.min_step_time, slowdown);
  std::this_thread::sleep_for(wait);
}

void ExternalPeer::close() {
  if (closed_) return;
  closed_ = true;
  control_changed_.notify_all();
  if (!store_) return;
  try {
    if (traits_ != nullptr) mixer_.flush(*store_);
  } catch (const std::exception& e) {
    logging::warn(std::string("last mixing round failed: ") + e.what());
  }
  mixer_.stop();
  const auto step = static_cast<std::int64_t>(last_step_.load());
  records_->after_step(
      step, std::nullopt, [this](PeerMetrics& m) { fill_counters(m); }, true);
  records_->checkpoint_if_due(step, plan_.steps_per_epoch, buffer_, true);
  network_->leave();
  const auto why = plan_.budget->why();
  records_->final_record(step, plan_.steps_per_epoch, why == RunBudget::End::none ? "closed" : to_string(why),
                         learning_rate(last_step_.load()));
}

// ---- the control file ------------------------------------------------------------------------

void ExternalPeer::apply_control(const emulation::PeerControl& control) {
  if (network_ != nullptr) network_->apply_control(control);
  slowdown_ = control.slowdown.value_or(cfg_.emulation.slowdown);
  if (control.stop && plan_.budget) plan_.budget->end(RunBudget::End::told);
  {
    std::lock_guard lock(control_mutex_);
    held_ = control.hold;
    pause_at_ = control.pause_at;
  }
  control_changed_.notify_all();
}

void ExternalPeer::wait_for_release() {
  std::unique_lock lock(control_mutex_);
  if (!held_ || stop_.load()) return;
  // Ready: joined, the world whole, the mixer up. The simulator reads this record and
  // starts every peer at once by lifting the hold.
  records_->write({{"type", "ready"}, {"peer", id_}, {"time_s", records_->seconds_since_start()}});
  logging::info("ready; held until every peer of the run is (--control-file)");
  while (held_ && !stop_.load()) control_changed_.wait_for(lock, std::chrono::milliseconds(200));
}

void ExternalPeer::pause_if_asked(std::int64_t step) {
  std::unique_lock lock(control_mutex_);
  if (!pause_at_ || step < *pause_at_ || stop_.load()) return;
  const std::int64_t at = *pause_at_;
  records_->write(
      {{"type", "paused"}, {"peer", id_}, {"step", step}, {"time_s", records_->seconds_since_start()}});
  logging::info("paused after step " + std::to_string(step) + " (--control-file: pause-at " +
                std::to_string(at) + ")");
  while (pause_at_ == at && !stop_.load()) control_changed_.wait_for(lock, std::chrono::milliseconds(200));
}

void ExternalPeer::fill_counters(PeerMetrics& m) {
  const auto t = mixer_.totals().exchanges;
  m.bytes_sent = t.bytes_sent;
  m.bytes_received = t.bytes_received;
  m.exchanges_ok = t.ok;
  m.exchanges_timed_out = t.timed_out;
  m.exchanges_busy = t.busy;
  if (network_) network_->fill_counters(m);
}

std::string ExternalPeer::address() const { return network_ ? network_->advertised_address() : ""; }

std::int64_t ExternalPeer::live_members() const {
  if (!network_) return 1;
  PeerMetrics m;
  network_->fill_counters(m);
  return std::max<std::int64_t>(m.live_members, 1);
}

StatusServer::Snapshot ExternalPeer::status() {
  StatusServer::Snapshot s;
  if (records_) s.metrics = records_->latest();
  s.metrics.peer_id = id_;
  s.metrics.algo = cfg_.mixing.algo;
  fill_counters(s.metrics);
  s.metrics.step = static_cast<std::int64_t>(last_step_.load());
  if (plan_.steps_per_epoch > 0)
    s.metrics.epoch = std::max<std::int64_t>(s.metrics.step - 1, 0) / plan_.steps_per_epoch + 1;
  if (records_) s.metrics.time_s = records_->seconds_since_start();
  s.status["run"] = cfg_.network.run;
  s.status["epochs"] = epochs_json(cfg_.train.epochs);
  s.status["test_acc"] = nullptr;  // the script's to measure
  s.status["test_loss"] = nullptr;
  s.status["members"] = network_->members_json();
  s.status["state"] = closed_ ? "ending" : "training";
  s.status["algo"] = cfg_.mixing.algo;
  return s;
}

}  // namespace hearsay
