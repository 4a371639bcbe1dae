// VirtualRun (virtual_simulation.hpp): building the peers, and the run in virtual time;
// its end is in virtual_run_end.cpp.
#include "sim/virtual_run.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <numeric>
#include <stdexcept>

#include "base/atomic_file.hpp"
#include "base/fiber.hpp"
#include "base/log.hpp"
#include "base/rng.hpp"
#include "model/zoo.hpp"
#include "peer/duration_flag.hpp"
#include "peer/metrics.hpp"
#include "peer/peer_config.hpp"
#include "peer/run_output.hpp"
#include "sim/peer_setup.hpp"
#include "sim/virtual_simulation.hpp"

namespace hearsay::sim {

namespace {
// Seconds to a tenth, as the rest of the simulator's output.
std::string fixed_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", s);
  return buf;
}

// The real time of one training step of `model` at `batch` on this machine: the median of
// five after two to warm up, on the first examples of the training set.
Duration measured_step_time(const SimConfig& cfg, const TrainTest& data) {
  auto model = make_model(cfg.training.model);
  model->init(cfg.training.seed);
  auto optimizer = make_optimizer(cfg.training, static_cast<std::size_t>(model->param_count()));
  auto session = make_training_session(Device{}, *model, *optimizer, {1, cfg.training.batch, true});
  session->bind_data(data.train, data.test);
  std::vector<std::int64_t> batch(
      static_cast<std::size_t>(std::min<std::int64_t>(cfg.training.batch, data.train.count)));
  std::iota(batch.begin(), batch.end(), std::int64_t{0});
  std::vector<Duration> took;
  for (int i = 0; i < 7; ++i) {
    const auto start = WallClock::now();
    session->compute_gradients(batch);
    session->apply_update(0.0f);
    if (i >= 2) took.push_back(WallClock::now() - start);
  }
  std::ranges::sort(took);
  return took[took.size() / 2];
}

}  // namespace

VirtualRun::VirtualRun(const SimConfig& cfg, const std::vector<Fault>& faults, const std::string& algo,
                       int repeat, std::uint64_t seed, const TrainTest& data,
                       const std::filesystem::path& dir,
                       const std::function<void(const RunProgress&)>& progress,
                       const std::function<bool()>& stop)
    : cfg_(cfg),
      faults_(faults),
      algo_(algo),
      data_(data),
      progress_(progress),
      stop_(stop),
      scheduler_(
          fiber::Scheduler::Options{.compute_threads = cfg.threads > 0 ? cfg.threads : usable_cores()}),
      evaluator_(cfg.training.model, data.test),
      fault_log_(faults),
      fault_done_(faults.size(), false),
      blocked_(static_cast<std::size_t>(cfg.peers)),
      own_link_(static_cast<std::size_t>(cfg.peers)),
      frozen_(static_cast<std::size_t>(cfg.peers), false),
      frozen_applied_(frozen_),
      freeze_of_(static_cast<std::size_t>(cfg.peers)) {
  result_ = planned_run(cfg, algo, repeat, seed, dir);
  if (!cfg.step_time_dist.empty()) dist_ = parse_step_time_dist(cfg.step_time_dist);
  base_step_ = !cfg.step_time.empty()
                   ? std::chrono::duration_cast<Duration>(parse_duration(cfg.step_time, "--step-time"))
               : dist_ ? Duration(dist_->median)
                       : measured_step_time(cfg, data);
  for (int r = 0; r < cfg.peers; ++r)
    step_rng_.emplace_back(seed ^ stable_hash("step-time:" + std::to_string(r)));
  eval_sample_ = sampled_peers(cfg.peers, eval_peer_count(cfg), seed);
  eval_every_ = eval_interval(cfg);
  exact_steps_ = evaluated_at_exact_steps(algo, cfg.overlap);
  planned_steps_ = planned_peer_steps(cfg, data_.train.count);
  next_eval_ = eval_every_;
  std::filesystem::create_directories(dir);
  const std::string run_id = "vsim-" + algo + "-" + std::to_string(repeat) + "-" + std::to_string(::getpid());
  restart_due_.resize(static_cast<std::size_t>(cfg.peers));
  VirtualPeerLinks& links = links_;
  links.scheduler = &scheduler_;
  links.fabric = fabric_;
  links.data = &data;
  links.step_cost = [this](int rank) { return step_cost(rank); };
  links.after_step = [this](int rank, std::int64_t examples) {
    const std::int64_t steps = peers_[static_cast<std::size_t>(rank)]->steps();
    if (budget_steps(exact_steps_, steps, planned_steps_) == steps)
      budget_samples_ += static_cast<double>(examples);
    after_step(examples);
    hold_while_frozen(rank);
  };
  links.ended = [this](int rank) { peer_ended(rank); };
  links.snapshot_taken = [this](int, std::int64_t) { evaluate_snapshots(); };
  links.gone = [this](int rank) {
    // On the scheduler's own stack, not the ending fiber's: building a peer is deep.
    if (restart_due_[static_cast<std::size_t>(rank)])
      scheduler_.at(scheduler_.now(), [this, rank] { start_again(rank); });
  };
  for (int r = 0; r < cfg.peers; ++r) {
    args_.push_back(peer_arguments(cfg, faults, "hearsay", algo, r, seed, run_id, dir));
    std::string settings;  // what it trains with, as a config file
    parse_peer_command_line(args_.back(), &settings);
    write_file_atomically(PeerFiles(dir, r).settings, settings);
    peers_.push_back(std::make_unique<VirtualPeer>(r, args_.back(), links));
  }
}

Duration VirtualRun::step_cost(int rank) {
  double factor = 1;
  for (const Fault& f : faults_)
    if (f.kind == Fault::Kind::slow && f.peer == rank && reached(f.at, elapsed_s(), run_epochs()))
      factor = f.slowdown;
  double base = seconds(base_step_);
  if (dist_)
    base =
        seconds(dist_->median) * std::exp(dist_->sigma * step_rng_[static_cast<std::size_t>(rank)].normal());
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(base * factor));
}

void VirtualRun::after_step(std::int64_t examples) {
  samples_ += static_cast<double>(examples);
  fire_due_faults();
  if (!exact_steps_ && run_epochs() + 1e-9 >= next_eval_) {
    evaluate(false);
    while (next_eval_ <= run_epochs() + 1e-9) next_eval_ += eval_every_;
  }
  end_if_budget_spent();
  const double real_s = std::chrono::duration<double>(WallClock::now() - wall_start_).count();
  if (!interrupted_ && !timed_out_ && cfg_.run_timeout_s > 0 && real_s > cfg_.run_timeout_s) {
    timed_out_ = true;  // --run-timeout counts real seconds: what the user waits for
    stop_peers();
  }
  if (!interrupted_ && stop_()) {
    interrupted_ = true;
    stop_peers();
  }
  show_progress();
}

// As the process engine's (SimulationRun::end_if_budget_spent), but exact: the samples are
// counted at every step, and the time budget is virtual time.
void VirtualRun::end_if_budget_spent() {
  const double budget_epochs = budget_samples_ / static_cast<double>(data_.train.count);
  if (budget_spent_ || !budget_spent(cfg_, algo_, budget_epochs, elapsed_s())) return;
  budget_spent_ = true;
  for (auto& p : peers_) p->end_training();
}

void VirtualRun::fire_due_faults() {
  fault_log_.observe(elapsed_s(), run_epochs());
  for (std::size_t i = 0; i < faults_.size(); ++i)
    if (!fault_done_[i] && reached(faults_[i].at, elapsed_s(), run_epochs())) {
      if (faults_[i].kind == Fault::Kind::kill) kill(i);
      if (faults_[i].kind == Fault::Kind::restart) restart(i);
    }
  for (std::size_t i = 0; i < faults_.size(); ++i) {
    if (faults_[i].kind == Fault::Kind::freeze) freeze_or_thaw(i);
    if (faults_[i].kind == Fault::Kind::disk_full) fill_or_free_disk(i);
  }
  apply_partitions();
}

// A full disk: the peer's checkpoints fail from its start to its end (or the run's).
void VirtualRun::fill_or_free_disk(std::size_t fault) {
  const Fault& f = faults_[fault];
  VirtualPeer& peer = *peers_[static_cast<std::size_t>(f.peer)];
  const bool started = reached(f.at, elapsed_s(), run_epochs());
  const bool ended = !f.to_the_end && reached(f.until, elapsed_s(), run_epochs());
  if (!fault_done_[fault] && started) {
    fault_done_[fault] = true;
    if (peer.ended() || peer.killed()) return;
    peer.set_disk_full(true);
    fault_log_.fired(fault, elapsed_s(), run_epochs());
  }
  if (fault_done_[fault] && ended && fault_log_.firings()[fault].fired &&
      !fault_log_.firings()[fault].healed_s) {
    peer.set_disk_full(false);
    fault_log_.healed(fault, elapsed_s());
  }
}

// A freeze starts when its time comes (a peer that is not training then is not frozen:
// the fault never fires) and ends at its end, or once no other peer is left to count its
// epochs. While frozen, the peer takes no step and its links drop everything, both ways:
// the silence its partners would hear. (A stopped process's kernel would keep what was
// sent to it and hand it over late; here it is lost.)
void VirtualRun::freeze_or_thaw(std::size_t fault) {
  const Fault& f = faults_[fault];
  const auto r = static_cast<std::size_t>(f.peer);
  VirtualPeer& peer = *peers_[r];
  if (!fault_done_[fault] && reached(f.at, elapsed_s(), run_epochs())) {
    fault_done_[fault] = true;
    if (peer.ended() || peer.killed() || frozen_[r]) return;
    frozen_[r] = true;
    freeze_of_[r] = fault;
    fault_log_.fired(fault, elapsed_s(), run_epochs());
    return;
  }
  if (freeze_of_[r] != fault) return;
  const bool others_advance = std::ranges::any_of(peers_, [&](const auto& p) {
    return p.get() != &peer && !p->ended() && !p->killed() && !frozen_[static_cast<std::size_t>(p->rank())];
  });
  if (reached(f.until, elapsed_s(), run_epochs()) || !others_advance) thaw(f.peer);
}

void VirtualRun::stop_peers() {
  for (auto& p : peers_) p->kill();
  for (int r = 0; r < cfg_.peers; ++r) thaw(r);  // a frozen peer's fiber wakes to end
}

void VirtualRun::thaw(int rank) {
  const auto r = static_cast<std::size_t>(rank);
  if (!frozen_[r]) return;
  frozen_[r] = false;
  fault_log_.healed(*std::exchange(freeze_of_[r], std::nullopt), elapsed_s());
  apply_partitions();
  thawed_.notify_all();
}

void VirtualRun::hold_while_frozen(int rank) {
  const auto r = static_cast<std::size_t>(rank);
  if (!frozen_[r]) return;
  apply_partitions();  // its links go silent before it waits
  std::unique_lock lock(freeze_mutex_);
  thawed_.wait(lock, [&] { return !frozen_[r]; });
}

void VirtualRun::kill(std::size_t fault) {
  fault_done_[fault] = true;
  VirtualPeer& victim = *peers_[static_cast<std::size_t>(faults_[fault].peer)];
  if (victim.ended()) return;  // a peer that finished cannot be killed: the fault never fires
  victim.kill();
  thaw(victim.rank());  // a frozen peer dies too: its fiber wakes to end
  fault_log_.fired(fault, elapsed_s(), run_epochs());
  logging::info("virtual sim: killed " + victim.id() + " at " + fixed_seconds(elapsed_s()) + " s");
}

void VirtualRun::restart(std::size_t fault) {
  fault_done_[fault] = true;
  const int rank = faults_[fault].peer;
  VirtualPeer& old = *peers_[static_cast<std::size_t>(rank)];
  if (old.ended() && !old.killed()) return;  // it finished: nothing to restart, the fault never fires
  restart_due_[static_cast<std::size_t>(rank)] = fault;
  old.kill();  // as the process engine does with a peer still alive at a restart
  thaw(rank);
  if (old.gone()) scheduler_.at(scheduler_.now(), [this, rank] { start_again(rank); });
}

void VirtualRun::start_again(int rank) {
  const auto r = static_cast<std::size_t>(rank);
  const std::size_t fault = *std::exchange(restart_due_[r], std::nullopt);
  auto checkpoint = peers_[r]->last_checkpoint();
  retired_.push_back(std::move(peers_[r]));
  peers_[r] = std::make_unique<VirtualPeer>(rank, args_[r], links_, std::move(checkpoint));
  peers_[r]->set_blocked(blocked_[r]);  // a partition in force holds for the new one too
  peers_[r]->set_own_link(own_link_[r]);
  if (budget_spent_) peers_[r]->end_training();
  for (const auto& p : peers_)  // the oracle's neighbour: the first peer still training
    if (p.get() != peers_[r].get() && !p->ended() && !p->killed()) {
      peers_[r]->continue_from(*p);
      break;
    }
  peers_[r]->start();
  fault_log_.fired(fault, elapsed_s(), run_epochs());
  logging::info("virtual sim: restarted " + peers_[r]->id() + " at " + fixed_seconds(elapsed_s()) + " s");
  tell_live_peers();
}

void VirtualRun::apply_partitions() {
  // Called after every step: the peers' blocked lists (N of up to N ids) and links are
  // rebuilt only when a partition's or a timed link's start or end has come since.
  std::vector<bool> now_reached;
  for (const Fault& f : faults_)
    if (f.kind == Fault::Kind::partition || f.timed_link())
      now_reached.insert(now_reached.end(), {reached(f.at, elapsed_s(), run_epochs()),
                                             !f.to_the_end && reached(f.until, elapsed_s(), run_epochs())});
  if (now_reached == partitions_reached_ && frozen_ == frozen_applied_) return;
  partitions_reached_ = std::move(now_reached);
  frozen_applied_ = frozen_;
  auto controls = controls_at(faults_, cfg_.peers,
                              [&](const FaultTime& t) { return reached(t, elapsed_s(), run_epochs()); });
  for (std::size_t r = 0; r < peers_.size(); ++r) {
    if (frozen_[r]) {  // a frozen peer hears and says nothing
      controls[r].blocked.clear();
      for (const auto& p : peers_)
        if (p->rank() != static_cast<int>(r)) controls[r].blocked.push_back(p->id());
    }
    if (controls[r].blocked != blocked_[r]) {
      blocked_[r] = controls[r].blocked;
      peers_[r]->set_blocked(blocked_[r]);
    }
    if (controls[r].link != own_link_[r]) {
      own_link_[r] = controls[r].link;
      peers_[r]->set_own_link(own_link_[r]);
    }
  }
}

void VirtualRun::evaluate_snapshots() {
  for (;;) {
    // A peer that skipped the point (restarted past it) is left out of it, as a killed one
    // is: waiting for it held every later point back to the run's end.
    const bool ready = std::ranges::all_of(peers_, [&](const auto& p) {
      return p->killed() || p->ended() || p->has_snapshot(next_point_) || p->skipped_snapshot(next_point_);
    });
    if (!ready) return;
    // The bytes each peer had sent at its snapshot: a peer that lags (a restarted one) is
    // evaluated late, when the others have sent more.
    double bytes = 0;
    for (const auto& p : peers_) bytes += static_cast<double>(p->sent_at_snapshot(next_point_));
    for (const auto& p : retired_) bytes += static_cast<double>(p->bytes_sent());
    std::vector<PeerParams> states;
    fiber::Scheduler::time_point reached = start_;  // when the last of them took its snapshot
    for (const auto& p : peers_)
      if (p->has_snapshot(next_point_)) {
        reached = std::max(reached, p->snapshot_time(next_point_));
        states.push_back({p->rank(), p->take_snapshot(next_point_)});
      }
    if (states.empty()) return;  // nobody got there: the run ends before this point
    Evaluation e = evaluator_.evaluate(states, eval_sample_);
    // When the last of its peers reached it; no earlier than the point before (a restarted
    // peer may take an earlier point later than the others take this one).
    e.time_s = std::max(seconds(reached - start_), result_.curve.empty() ? 0.0 : result_.curve.back().time_s);
    e.run_epochs = static_cast<double>(next_point_) * eval_every_;
    e.bytes_per_peer = bytes / cfg_.peers;
    result_.curve.push_back(e);
    ++next_point_;
  }
}

void VirtualRun::peer_ended(int rank) {
  training_ended_s_ = elapsed_s();  // the run's time ends with the last peer's training
  // A peer diverged: the run says so whatever the others do next, and it ends now rather
  // than at its budget (a peer process stops itself; the others, watching their own loss,
  // mostly soon after).
  if (peers_[static_cast<std::size_t>(rank)]->diverged() && !diverged_) {
    diverged_ = true;
    scheduler_.at(scheduler_.now(), [this] { stop_peers(); });
  }
  // A peer that ended says bye, as a peer process does (a killed one does not, nor one that
  // failed: a peer process says bye only at the end of its training): the others stop
  // counting on its steps (a lockstep peer ahead of the others ends once they have).
  if (const VirtualPeer& ended = *peers_[static_cast<std::size_t>(rank)];
      !ended.killed() && ended.failure().empty())
    for (auto& p : peers_)
      if (!p->ended()) p->peer_left(ended.id(), ended.steps());
  for (std::size_t i = 0; i < faults_.size(); ++i)  // a freeze with nobody left to count its epochs
    if (faults_[i].kind == Fault::Kind::freeze) freeze_or_thaw(i);
  if (exact_steps_) evaluate_snapshots();
  tell_live_peers();
}

// Oracle membership: gossip mixes with the peers still training.
void VirtualRun::tell_live_peers() {
  std::vector<std::string> live;
  for (const auto& p : peers_)
    if (!p->ended() && !p->killed()) live.push_back(p->id());
  std::ranges::sort(live);  // once here, not once a peer
  for (const auto& p : peers_)
    if (!p->ended()) p->set_live_peers(live);
}

void VirtualRun::evaluate(bool final) {
  std::vector<PeerParams> states;
  for (const auto& p : peers_) {
    if (p->killed() || (final && !p->failure().empty())) continue;
    states.push_back({p->rank(), p->state()});
  }
  if (states.empty()) return;
  Evaluation e = evaluator_.evaluate(states, eval_sample_);
  e.time_s = elapsed_s();
  e.run_epochs = run_epochs();
  e.bytes_per_peer = sent_per_peer();
  result_.curve.push_back(e);
}

void VirtualRun::show_progress() {
  const auto now = WallClock::now();
  if (now - last_progress_ < std::chrono::milliseconds(500)) return;
  last_progress_ = now;
  RunProgress p;
  p.algo = &algo_;
  p.time_s = elapsed_s();
  p.run_epochs = run_epochs();
  p.epochs = cfg_.training.epochs;
  p.running = static_cast<int>(std::ranges::count_if(peers_, [](const auto& x) { return !x->ended(); }));
  p.samples_per_s = p.time_s > 0 ? samples_ / p.time_s : 0;
  if (!result_.curve.empty()) p.last_acc = result_.curve.back().acc_avg_model;
  progress_(p);
}

void VirtualRun::at_seconds(double s, std::function<void()> what) {
  scheduler_.at(start_ + std::chrono::duration_cast<Duration>(std::chrono::duration<double>(s)),
                std::move(what));
}

RunResult VirtualRun::run() {
  // Faults in seconds come at their time even when no step ends then; those in epochs come
  // with the step that reaches them (after_step).
  for (const Fault& f : faults_) {
    if (f.at.unit == FaultTime::Unit::seconds) at_seconds(f.at.value, [this] { fire_due_faults(); });
    if ((f.kind == Fault::Kind::partition || f.kind == Fault::Kind::freeze ||
         f.kind == Fault::Kind::disk_full) &&
        !f.to_the_end && f.until.unit == FaultTime::Unit::seconds)
      at_seconds(f.until.value, [this] { fire_due_faults(); });
  }
  if (cfg_.time_budget_s() > 0)
    at_seconds(cfg_.time_budget_s(), [this] { end_if_budget_spent(); });  // no step may end then
  for (auto& p : peers_) p->start();
  scheduler_.run();
  finish();
  return std::move(result_);
}

RunResult run_virtual_simulation(const SimConfig& cfg, const std::vector<Fault>& faults,
                                 const std::string& algo, int repeat, std::uint64_t seed,
                                 const TrainTest& data, const std::filesystem::path& dir,
                                 const std::function<void(const RunProgress&)>& progress,
                                 const std::function<bool()>& stop) {
  // A thousand peers share this process's log: their warnings (a partner that ended or
  // died, a round that timed out) would bury the progress line. The run's status and
  // summary say what happened; HEARSAY_LOG=warn (or debug) shows them all.
  struct QuietPeers {
    logging::Level before = logging::level();
    QuietPeers() {
      if (std::getenv("HEARSAY_LOG") == nullptr) logging::set_level(logging::Level::error);
    }
    ~QuietPeers() { logging::set_level(before); }
  } quiet;
  VirtualRun run(cfg, faults, algo, repeat, seed, data, dir, progress, stop);
  return run.run();
}

}  // namespace hearsay::sim
