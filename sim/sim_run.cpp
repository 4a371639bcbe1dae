// SimulationRun: setting up, starting the peers, and watching them (faults, evaluation
// points, progress). How a run ends is in sim_run_end.cpp.
#include "sim/sim_run.hpp"

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <thread>

#include "base/atomic_file.hpp"
#include "gossip/mixing/algorithms/registry.hpp"
#include "model/checkpoint.hpp"
#include "model/data/epoch_order.hpp"
#include "model/zoo.hpp"
#include "peer/peer_config.hpp"
#include "peer/run_budget.hpp"
#include "peer/state_transfer.hpp"
#include "peer/training_flags.hpp"
#include "sim/peer_setup.hpp"
#include "sim/simulation_run.hpp"

namespace hearsay::sim {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// The watch interval, not a synchronisation: faults and evaluation points given in epochs
// happen within one interval of being due, a small fraction of an epoch on any real run.
constexpr auto kWatchInterval = 20ms;
// How long a peer may take to listen (load its data, bind), and then to be ready to train
// (join, wait for the whole world, build its mixer).
constexpr auto kListenTimeout = 60s;
constexpr auto kReadyTimeout = 120s;

std::string this_executable() { return fs::read_symlink("/proc/self/exe").string(); }

std::string topology_of(const std::string& algo, const std::string& graph) {
  const auto* a = algorithms::find_algorithm(algo);
  return a != nullptr && !a->topology.empty() ? std::string(a->topology) : graph;
}

transport::ZmqOptions observer_options(const std::string& run_id, const EvaluationWorker& worker) {
  transport::ZmqOptions o;
  o.id = "sim-observer";
  o.expect = {run_id, worker.fingerprint()};
  o.security.insecure = true;
  o.max_payload_bytes = 4 * 3 * static_cast<std::uint64_t>(worker.state_count()) + 4096;
  return o;
}

}  // namespace

RunResult planned_run(const SimConfig& cfg, const std::string& algo, int repeat, std::uint64_t seed,
                      const fs::path& dir) {
  RunResult r;
  r.algo = algo;
  r.topology = topology_of(algo, cfg.graph);
  r.compress = compress_for(cfg, algo);
  r.no_lookahead = cfg.no_lookahead && algorithms::runs_lookahead(algo, r.compress);
  r.peers = cfg.peers;
  r.epochs = cfg.training.epochs;
  r.repeat = repeat;
  r.seed = seed;
  r.faults = cfg.faults;
  r.link = cfg.link;
  r.target_acc = cfg.target_acc;
  r.dir = dir;
  r.engine = cfg.engine;
  return r;
}

const Evaluation* first_reaching(const std::vector<Evaluation>& curve, std::optional<double> target) {
  if (target)
    for (const auto& e : curve)
      if (e.acc_avg_model >= *target) return &e;
  return nullptr;
}

std::optional<double> time_to_target(const std::vector<Evaluation>& curve, std::optional<double> target) {
  if (const Evaluation* e = first_reaching(curve, target)) return e->time_s;
  return std::nullopt;
}

std::optional<double> bytes_to_target(const std::vector<Evaluation>& curve, std::optional<double> target) {
  if (const Evaluation* e = first_reaching(curve, target); e != nullptr && e->bytes_per_peer >= 0)
    return e->bytes_per_peer;
  return std::nullopt;
}

const RunResult* allreduce_reference(const std::vector<RunResult>& runs, int repeat) {
  for (const RunResult& a : runs)
    if (a.algo == "allreduce" && a.repeat == repeat && a.status == "ok" && a.final_evaluation()) return &a;
  return nullptr;
}

bool budget_spent(const SimConfig& cfg, const std::string& algo, double run_epochs, double elapsed_s) {
  const auto* traits = algorithms::find_algorithm(algo);
  const bool per_peer_only = traits != nullptr && !traits->survives_lost_peer;
  const bool samples = cfg.budget == "global" && !per_peer_only && run_epochs + 1e-9 >= cfg.training.epochs;
  return samples || (cfg.time_budget_s() > 0 && elapsed_s >= cfg.time_budget_s());
}

std::int64_t planned_peer_steps(const SimConfig& cfg, std::int64_t train_count) {
  const std::int64_t batch = std::max<std::int64_t>(cfg.training.batch, 1);
  // As every ranked peer plans its run (plan_run).
  return planned_steps(cfg.training.epochs,
                       steps_per_epoch(examples_per_epoch(train_count, train_count, cfg.peers), batch));
}

std::int64_t budget_steps(bool lockstep, std::int64_t steps, std::int64_t planned) {
  return lockstep ? std::min(steps, planned) : steps;
}

void compare_with_allreduce(std::vector<RunResult>& runs) {
  for (RunResult& r : runs) {
    r.time_to_reference_s.reset();
    r.acc_at_reference_end.reset();
    const RunResult* reference = allreduce_reference(runs, r.repeat);
    if (reference == nullptr) continue;
    r.time_to_reference_s =
        time_to_target(r.curve, reference->final_evaluation()->acc_avg_model - kReferenceMargin);
    // Its accuracy as all-reduce ended: its last evaluation by then (its final one if it
    // ended first; none if it had none yet).
    for (const Evaluation& e : r.curve)
      if (e.time_s <= reference->wall_s + 1e-9) r.acc_at_reference_end = e.acc_avg_model;
  }
}

RunResult run_simulation(const SimConfig& cfg, const std::vector<Fault>& faults, const std::string& algo,
                         int repeat, std::uint64_t seed, const TrainTest& data, const fs::path& dir,
                         const std::function<void(const RunProgress&)>& progress,
                         const std::function<bool()>& stop) {
  fs::create_directories(dir);
  return SimulationRun(cfg, faults, algo, repeat, seed, data, dir).run(progress, stop);
}

// ---- setting up ---------------------------------------------------------------------------

SimulationRun::SimulationRun(const SimConfig& cfg, const std::vector<Fault>& faults, const std::string& algo,
                             int repeat, std::uint64_t seed, const TrainTest& data, const fs::path& dir)
    : cfg_(cfg),
      faults_(faults),
      algo_(algo),
      train_count_(static_cast<double>(data.train.count)),
      lockstep_(evaluated_at_exact_steps(algo, cfg.overlap)),
      planned_steps_(planned_peer_steps(cfg, data.train.count)),
      run_id_("sim-" + algo + "-" + std::to_string(repeat) + "-" + std::to_string(::getpid())),
      external_(start_script_evaluator(cfg, algo, seed, run_id_, dir)),
      worker_(cfg.training.model, data.test, sampled_peers(cfg.peers, eval_peer_count(cfg), seed), external_),
      quiet_(logging::Level::error),
      observer_(observer_options(run_id_, worker_)),
      cluster_(cfg.peers),
      divergence_(cfg.peers, make_model(cfg.training.model)->classes()),
      fault_log_(faults),
      checkpoint_watch_(cfg.training.model, external_ != nullptr),
      eval_every_(eval_interval(cfg)),
      exact_steps_(evaluated_at_exact_steps(algo, cfg.overlap)),
      next_eval_(eval_every_) {
  const std::string executable = cfg.binary.empty() ? this_executable() : cfg.binary;
  peers_.reserve(static_cast<std::size_t>(cfg.peers));
  for (int r = 0; r < cfg.peers; ++r) {
    peers_.emplace_back(r, peer_arguments(cfg, faults, executable, algo, r, seed, run_id_, dir), dir);
    const PeerFiles& f = peers_.back().files;
    for (const auto& old : {f.log, f.metrics, f.control, f.ready, f.settings}) fs::remove(old);  // a repeat starts afresh
    fs::remove_all(f.checkpoint_dir);
    if (!faults.empty()) checkpoint_watch_.add(peers_.back().id, checkpoint_path(f.checkpoint_dir));
    // What it trains with, as a config file; a command line the peer refuses is left for
    // the peer to refuse in its own words.
    std::string settings;
    try {
      parse_peer_command_line(peers_.back().argv, &settings);
      write_file_atomically(f.settings, settings);
    } catch (const std::invalid_argument&) {
    }
  }
  for (const Fault& f : faults_)
    schedule_.push_back({&f, pause_step(f, data.train.count, cfg.peers, cfg.training.batch)});
  write_controls(0, 0);
  // Prometheus (file_sd) and hearsay watch follow the run under way: each run's peers
  // replace the last run's in one file, written whole.
  if (cfg.http_port > 0)
    write_file_atomically(fs::path(cfg.out) / "prometheus-targets.json",
                          prometheus_targets(cfg, run_id_, algo).dump(1) + "\n");

  result_ = planned_run(cfg, algo, repeat, seed, dir);
}

// ---- the run --------------------------------------------------------------------------------

RunResult SimulationRun::run(const std::function<void(const RunProgress&)>& progress,
                             const std::function<bool()>& stop) {
  start_peers();
  release_hold();
  while (status_.empty()) {
    const Look now = look();
    end_if_budget_spent(now);
    apply_due_faults(now);
    apply_due_spans(now);
    evaluate_due_points(now);
    checkpoint_watch_.look(now.elapsed);
    if (cluster_.running_count() == 0) break;
    if (stop && stop()) {
      status_ = "interrupted";
      break;
    }
    if (cfg_.run_timeout_s > 0 && now.elapsed > cfg_.run_timeout_s) {
      status_ = timeout_status();
      break;
    }
    show_progress(now, progress);
    std::this_thread::sleep_for(kWatchInterval);
  }
  return finish();
}

// ---- starting -------------------------------------------------------------------------------

void SimulationRun::start_peers() {
  launched_ = Clock::now();
  try {
    // The seed first: the others join through it. Every algorithm starts training once
    // all have joined, as the fixed graphs must; gossip would otherwise let the first
    // peers train alone (a restarted peer rejoins a run under way, without the flag).
    // Where the others listen is learnt once all are started, so that they load their
    // data at the same time.
    for (PeerRecord& peer : peers_) {
      std::vector<std::string> args = peer.argv;
      args.push_back("--wait-for-world");
      spawn(peer, std::move(args),
            peer.rank == 0 ? std::vector<std::string>{} : std::vector{peers_[0].ready->address});
      if (peer.rank == 0) await_listening(peer);
    }
    for (PeerRecord& peer : peers_)
      if (peer.rank != 0) await_listening(peer);
    await_ready_to_train();
  } catch (const std::exception& e) {
    status_ = std::string("failed: ") + e.what();
  }
}

// Starts the peer (joining through `seeds`, if any); its old ready file is gone first, so
// that the next one read is this process's.
void SimulationRun::spawn(PeerRecord& peer, std::vector<std::string> args,
                          const std::vector<std::string>& seeds) {
  for (const auto& seed : seeds) args.insert(args.end(), {"--join", seed});
  fs::remove(peer.files.ready);
  peer.ready.reset();
  cluster_.start(peer.rank, args, peer.files.log);
}

// Until the peer's ready file says where it listens; std::runtime_error naming the peer
// (and why it ended, from its log) when it ends first or does not listen in time.
void SimulationRun::await_listening(PeerRecord& peer) {
  ReadyWait wait;
  wait.who = peer.id;
  wait.log = peer.files.log;
  wait.timeout = kListenTimeout;
  wait.ended = [&]() -> std::optional<std::string> {
    cluster_.reap();
    if (cluster_.running(peer.rank)) return std::nullopt;
    return cluster_.exit_of(peer.rank)->describe();
  };
  wait.reason = [&] { return last_error_line(peer.files.log); };
  peer.ready = await_ready_file(peer.files.ready, wait);
  observer_.connect(peer.id, peer.ready->address);
}

// Until every peer wrote its "ready" metrics record; std::runtime_error naming a peer that
// ended first (with its last error line) or was not ready in time.
void SimulationRun::await_ready_to_train() {
  const auto give_up = Clock::now() + kReadyTimeout;
  for (;;) {
    const PeerRecord* missing = nullptr;
    for (PeerRecord& peer : peers_) {
      read_metrics(peer);
      if (!peer.ready_to_train && missing == nullptr) missing = &peer;
    }
    if (missing == nullptr) return;
    cluster_.reap();
    for (const PeerRecord& peer : peers_)
      if (!peer.ready_to_train && !cluster_.running(peer.rank))
        throw std::runtime_error(peer.id + " " + cluster_.exit_of(peer.rank)->describe() +
                                 " before training began: " + last_error_line(peer.files.log));
    if (Clock::now() > give_up)
      throw std::runtime_error(missing->id + " was not ready to train within 120 s of listening");
    std::this_thread::sleep_for(kWatchInterval);  // the metrics file is all there is to watch
  }
}

// Times count from here: every peer is ready (joined, the world whole, its mixer up), and
// lifting the hold starts them all at once. Loading and joining (startup_s) cost every
// algorithm the same and are reported apart. (A run that failed to start lifts it too.)
void SimulationRun::release_hold() {
  holding_ = false;
  write_controls(0, 0);
  start_ = Clock::now();
  result_.startup_s = std::chrono::duration<double>(start_ - launched_).count();
  last_progress_ = Clock::now() - std::chrono::seconds(1);
}

// ---- watching -------------------------------------------------------------------------------

SimulationRun::Look SimulationRun::look() {
  Look now;
  for (PeerRecord& peer : peers_) read_metrics(peer);
  double budget_samples = 0;
  for (const PeerRecord& peer : peers_) {
    const auto steps = static_cast<std::int64_t>(peer.metrics.step());
    now.samples += static_cast<double>(steps) * cfg_.training.batch;
    budget_samples +=
        static_cast<double>(budget_steps(lockstep_, steps, planned_steps_)) * cfg_.training.batch;
  }
  now.run_epochs = now.samples / train_count_;
  now.budget_epochs = budget_samples / train_count_;
  now.elapsed = seconds_since_start();
  cluster_.reap();
  write_controls(now.elapsed, now.run_epochs);
  fault_log_.observe(now.elapsed, now.run_epochs);
  return now;
}

void SimulationRun::read_metrics(PeerRecord& peer) {
  peer.metrics.read_new(peer.files.metrics, [&](const nlohmann::json& record) {
    divergence_.observe(peer.rank, record);
    const std::string type = record.value("type", "");
    if (type == "ready") peer.ready_to_train = true;
    if (type == "paused") peer.paused_at = record.value("step", -1);
    if (type == "start") {
      peer.shard_examples = record.value("train_examples", std::int64_t{-1});
      peer.settings = record.value("settings", nlohmann::json());
    }
  });
}

// What each peer's control file says (partitions, late slow faults, the pause before a
// kill or restart in epochs, and the hold that starts the peers together); written when it
// changes.
void SimulationRun::write_controls(double elapsed, double run_epochs) {
  auto now =
      controls_at(faults_, cfg_.peers, [&](const FaultTime& t) { return reached(t, elapsed, run_epochs); });
  for (const auto& s : schedule_) {
    if (s.delivered || !s.pause_step) continue;
    auto& at = now.at(static_cast<std::size_t>(s.fault->peer)).pause_at;
    at = std::min(at.value_or(*s.pause_step), *s.pause_step);
  }
  for (PeerRecord& peer : peers_) {
    emulation::PeerControl& control = now[static_cast<std::size_t>(peer.rank)];
    control.hold = holding_;
    control.stop = budget_spent_;
    if (control == peer.control && fs::exists(peer.files.control)) continue;
    write_file_atomically(peer.files.control, to_text(control));
    peer.control = control;
  }
}

// A global budget (asynchronous algorithms: lockstep peers end at their epochs together)
// is spent once the peers' metrics, read every 20 ms and written every 0.25 s, count
// --epochs epochs of samples; a time budget once that much time has passed. Every peer's
// control file then says stop: they end within the control file's 50 ms poll and a step.
void SimulationRun::end_if_budget_spent(const Look& now) {
  if (budget_spent_ || !budget_spent(cfg_, algo_, now.budget_epochs, now.elapsed)) return;
  budget_spent_ = true;
  write_controls(now.elapsed, now.run_epochs);
}

// Kills and restarts: due at their time, or once their peer paused at its step for one
// given in epochs.
void SimulationRun::apply_due_faults(const Look& now) {
  for (std::size_t i = 0; i < schedule_.size(); ++i) {
    const ScheduledFault& s = schedule_[i];
    const Fault& f = *s.fault;
    if (s.delivered || (f.kind != Fault::Kind::kill && f.kind != Fault::Kind::restart)) continue;
    const PeerRecord& peer = peers_.at(static_cast<std::size_t>(f.peer));
    const bool waits_for_it = s.pause_step && peer.paused_at >= *s.pause_step;
    if (reached(f.at, now.elapsed, now.run_epochs) || waits_for_it) deliver(i, now, waits_for_it);
  }
}

// Freezes and full disks, from their start to their end. A freeze that ends in epochs also
// ends once no other peer is left to count them (the rest ended or are stopped too), and
// a peer that is not running at the start is spared (the fault never fires).
void SimulationRun::apply_due_spans(const Look& now) {
  const auto others_advance = [&](int rank) {
    for (const PeerRecord& peer : peers_)
      if (peer.rank != rank && cluster_.running(peer.rank) &&
          std::none_of(schedule_.begin(), schedule_.end(), [&](const ScheduledFault& s) {
            return s.in_force && s.fault->kind == Fault::Kind::freeze && s.fault->peer == peer.rank;
          }))
        return true;
    return false;
  };
  for (std::size_t i = 0; i < schedule_.size(); ++i) {
    ScheduledFault& s = schedule_[i];
    const Fault& f = *s.fault;
    if (f.kind != Fault::Kind::freeze && f.kind != Fault::Kind::disk_full) continue;
    if (!s.delivered && reached(f.at, now.elapsed, now.run_epochs)) {
      s.delivered = true;
      if (cluster_.running(f.peer)) impose(i, now);
      continue;
    }
    if (!s.in_force || f.to_the_end) continue;
    const bool frozen_alone = f.kind == Fault::Kind::freeze && !others_advance(f.peer);
    if (reached(f.until, now.elapsed, now.run_epochs) || frozen_alone) lift(i, now.elapsed, true);
  }
}

// Room left on a full disk: its log and metrics go on a while, a checkpoint (a model's
// parameters and optimizer state, a megabyte and more) does not fit.
constexpr rlim_t kDiskRoom = 256 * 1024;

void SimulationRun::impose(std::size_t index, const Look& now) {
  ScheduledFault& s = schedule_[index];
  const PeerRecord& peer = peers_.at(static_cast<std::size_t>(s.fault->peer));
  if (s.fault->kind == Fault::Kind::freeze) {
    cluster_.signal(peer.rank, SIGSTOP);
  } else {
    // The disk fills up: the peer may write what it has and a little more, no checkpoint.
    const auto size = [](const fs::path& p) {  // 0 for a file not there yet
      std::error_code ec;
      const auto bytes = fs::file_size(p, ec);
      return ec ? rlim_t{0} : static_cast<rlim_t>(bytes);
    };
    rlimit full{std::max(size(peer.files.log), size(peer.files.metrics)) + kDiskRoom, RLIM_INFINITY};
    rlimit before{};
    if (::prlimit(cluster_.pid_of(peer.rank), RLIMIT_FSIZE, nullptr, &before) != 0) return;
    full.rlim_max = before.rlim_max;
    if (::prlimit(cluster_.pid_of(peer.rank), RLIMIT_FSIZE, &full, nullptr) != 0) return;
    s.file_limit = before.rlim_cur;
  }
  s.in_force = true;
  fault_log_.fired(index, now.elapsed, now.run_epochs);
}

void SimulationRun::lift(std::size_t index, double elapsed, bool signal) {
  ScheduledFault& s = schedule_[index];
  if (!s.in_force) return;
  s.in_force = false;
  const int rank = s.fault->peer;
  if (signal && cluster_.running(rank)) {
    if (s.fault->kind == Fault::Kind::freeze) {
      cluster_.signal(rank, SIGCONT);
    } else {
      rlimit back{};
      if (::prlimit(cluster_.pid_of(rank), RLIMIT_FSIZE, nullptr, &back) == 0) {
        back.rlim_cur = s.file_limit;
        ::prlimit(cluster_.pid_of(rank), RLIMIT_FSIZE, &back, nullptr);
      }
    }
  }
  fault_log_.healed(index, elapsed);
}

void SimulationRun::deliver(std::size_t index, const Look& now, bool waits_for_it) {
  ScheduledFault& s = schedule_[index];
  PeerRecord& peer = peers_.at(static_cast<std::size_t>(s.fault->peer));
  s.delivered = true;
  for (std::size_t i = 0; i < schedule_.size(); ++i)  // a frozen peer's freeze ends with it
    if (schedule_[i].fault->peer == peer.rank) lift(i, now.elapsed, false);
  // Paused at its step, the peer is further than its last metrics (every --log-every) say.
  const double at_pause =
      waits_for_it ? static_cast<double>(peer.paused_at) * cfg_.peers * cfg_.training.batch / train_count_
                   : 0;
  fault_log_.fired(index, now.elapsed, std::max(now.run_epochs, at_pause));
  peer.paused_at = -1;
  if (cluster_.running(peer.rank)) {
    cluster_.signal(peer.rank, SIGKILL);
    while (cluster_.running(peer.rank)) {  // SIGKILL cannot be ignored: it ends at once
      std::this_thread::sleep_for(5ms);
      cluster_.reap();
    }
  }
  write_controls(now.elapsed, now.run_epochs);  // no pause for it any more: a restart starts without
  peer.killed = s.fault->kind == Fault::Kind::kill;
  if (s.fault->kind == Fault::Kind::restart) restart(peer);
}

// The peer again, from its last checkpoint, rejoining through any of the peers that still run.
void SimulationRun::restart(PeerRecord& peer) {
  std::vector<std::string> seeds;
  for (const PeerRecord& other : peers_)
    if (other.rank != peer.rank && cluster_.running(other.rank) && other.ready)
      seeds.push_back(other.ready->address);
  std::vector<std::string> again = peer.argv;
  again.push_back("--resume");
  try {
    spawn(peer, again, seeds);
    await_listening(peer);
  } catch (const std::exception& e) {
    status_ = std::string("failed: restarting ") + e.what();
  }
}

void SimulationRun::evaluate_due_points(const Look& now) {
  if (exact_steps_)
    evaluate_snapshots();
  else if (now.run_epochs >= next_eval_ && next_eval_ < cfg_.training.epochs)
    evaluate_live(now);
}

// Point k is due once every peer still running has saved its snapshot k.
void SimulationRun::evaluate_snapshots() {
  while (static_cast<double>(next_point_) * eval_every_ < cfg_.training.epochs - 1e-9) {
    const bool all_there = std::all_of(peers_.begin(), peers_.end(), [&](const PeerRecord& peer) {
      return !cluster_.running(peer.rank) || peer.killed || fs::exists(peer.files.snapshot(next_point_));
    });
    if (!all_there) return;
    auto collected = read_snapshots(next_point_);
    if (!collected.empty())
      worker_.submit(seconds_since_start(), static_cast<double>(next_point_) * eval_every_, sent_per_peer(),
                     std::move(collected));
    ++next_point_;
  }
}

// All live peers at once, within one deadline: a peer that is leaving as the point falls
// due (its run done) costs the point that peer, not the others.
void SimulationRun::evaluate_live(const Look& now) {
  next_eval_ += eval_every_;
  std::vector<std::string> live;
  for (const PeerRecord& peer : peers_)
    if (cluster_.running(peer.rank)) live.push_back(peer.id);
  std::vector<PeerParams> collected;
  for (auto& pulled : pull_states(observer_, live, static_cast<std::size_t>(worker_.state_count()), 2s))
    for (const PeerRecord& peer : peers_)
      if (pulled.from == peer.id) collected.push_back({peer.rank, std::move(pulled.state.params)});
  if (!collected.empty())
    worker_.submit(seconds_since_start(), now.run_epochs, sent_per_peer(), std::move(collected));
}

double SimulationRun::sent_per_peer() const {
  double bytes = 0;
  for (const PeerRecord& peer : peers_) bytes += peer.metrics.bytes_sent();
  return bytes / cfg_.peers;
}

// The snapshots k of the peers that saved one (killed peers left out), read and removed.
std::vector<PeerParams> SimulationRun::read_snapshots(std::int64_t point) {
  std::vector<PeerParams> collected;
  const auto count = static_cast<std::size_t>(worker_.state_count());
  for (const PeerRecord& peer : peers_) {
    const fs::path path = peer.files.snapshot(point);
    if (peer.killed || !fs::exists(path)) continue;
    std::vector<float> params(count);
    std::ifstream in(path, std::ios::binary);
    in.read(reinterpret_cast<char*>(params.data()), static_cast<std::streamsize>(count * sizeof(float)));
    if (!in || in.peek() != std::char_traits<char>::eof()) {
      logging::warn("sim: " + path.string() + " is not " + std::to_string(count) + " parameters; left out");
      continue;
    }
    collected.push_back({peer.rank, std::move(params)});
    fs::remove(path);
  }
  return collected;
}

std::string SimulationRun::timeout_status() const {
  std::string still;
  for (const PeerRecord& peer : peers_)
    if (cluster_.running(peer.rank)) still += (still.empty() ? "" : ", ") + peer.id;
  return "timeout after " + std::to_string(static_cast<long>(cfg_.run_timeout_s)) +
         " s (still running: " + still + ")";
}

// About twice a second.
void SimulationRun::show_progress(const Look& now, const std::function<void(const RunProgress&)>& progress) {
  if (!progress || Clock::now() - last_progress_ < 500ms) return;
  last_progress_ = Clock::now();
  RunProgress p;
  p.algo = &algo_;
  p.time_s = now.elapsed;
  p.run_epochs = now.run_epochs;
  p.epochs = cfg_.training.epochs;
  p.running = cluster_.running_count();
  p.samples_per_s = now.elapsed > 0 ? now.samples / now.elapsed : 0;
  p.last_acc = worker_.last_acc();
  progress(p);
}

double SimulationRun::seconds_since_start() const {
  return std::chrono::duration<double>(Clock::now() - start_).count();
}

}  // namespace hearsay::sim
