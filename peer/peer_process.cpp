// PeerProcess: the life of a peer, its parts wired together, and the control file.
#include "peer/peer_process.hpp"

#include <algorithm>

#include "base/log.hpp"
#include "peer/ready_file.hpp"

namespace hearsay {

namespace {
using namespace std::chrono_literals;
}  // namespace

PeerProcess::PeerProcess(const PeerConfig& cfg, const std::atomic<bool>& stop)
    : cfg_(cfg), stop_(stop), id_(peer_id(cfg)), mixer_(cfg, traits_, id_) {}

PeerProcess::~PeerProcess() {
  // Order matters: nothing may call into a part that is gone. The control file's thread
  // uses the transport; the mixer stops before membership, whose thread tells it of
  // changes; membership, the responder and the HTTP server stop before the trainer goes.
  control_.reset();
  mixer_.stop();
  if (network_) network_->stop();
}

int PeerProcess::run() {
  trainer_ = std::make_unique<PeerTrainer>(cfg_, id_, stop_, started_);
  trainer_->link({&mixer_, [this](PeerMetrics& m) { fill_counters(m); }, [this] { pause_if_asked(); }});
  trainer_->resume_from_checkpoint();
  open_network();
  network_->join_run();
  phase_ = Phase::waiting;
  // --resume: a restart into a run under way, with or without a checkpoint yet (a peer
  // killed before its first one comes back from scratch, into the same run).
  network_->wait_for_ranks(trainer_->resumed() || cfg_.checkpoint.resume);
  network_->wait_for_peers();
  // A gossip joiner trains at once, while the news of it spreads (a heartbeat or two): a
  // partner that does not know it yet refuses its request, which costs a round at most
  // half a step's compute, and the joiner's algorithm takes in members as they come
  // (MixerHost::members_changed). It used to wait for the view to be quiet for two
  // heartbeats first: 2 s of every gossip run's start-up (3.1 s against all-reduce's 1.1 s).
  if (!stopping()) pull_state_if_late();
  start_mixer();
  wait_for_release();
  phase_ = Phase::training;
  trainer_->train();

  // The end, normal or asked for: everything mixed so far goes into the final state.
  phase_ = Phase::ending;
  trainer_->flush_mixing_at_end();
  mixer_.stop();
  trainer_->report_last_interval();
  trainer_->save_checkpoint("final");
  network_->leave();
  trainer_->write_final_record();
  return 0;
}

// ---- setting up ----------------------------------------------------------------------------

void PeerProcess::open_network() {
  network_ =
      std::make_unique<NetworkNode>(cfg_, id_, stop_, trainer_->fingerprint(), trainer_->parameter_count());
  // Before the first message: every message carries this peer's steps (the run's progress).
  network_->transport().set_progress(trainer_->run_progress());
  // Before anyone is greeted: the control file may block peers (a partition).
  if (!cfg_.emulation.control_file.empty())
    control_ = std::make_unique<emulation::ControlFileWatcher>(
        cfg_.emulation.control_file, [this](const emulation::PeerControl& c) { apply_control(c); },
        [](const std::string& why) { logging::warn("control file: " + why); });
  NetworkNode::Hooks hooks;
  hooks.state = [this] { return trainer_->snapshot_for_neighbour(); };
  hooks.status = [this] { return http_snapshot(); };
  // On membership's thread; the mixer host ignores changes until it has started.
  hooks.members_changed = [this] { mixer_.members_changed(network_->membership()); };
  network_->start(std::move(hooks));
  logging::info("peer '" + id_ + "' of run '" + cfg_.network.run + "' listening at " +
                network_->advertised_address());
  write_ready_file(cfg_, id_, network_->advertised_address(), network_->http_port());
}

void PeerProcess::pull_state_if_late() {
  // Peers that start together (--wait-for-world, allreduce) all begin at --seed's
  // initialisation: a peer whose neighbour took a step or two before it got here is not
  // late, and pulling that neighbour's state would make the run depend on timing.
  if (!pulls_state_when_joining(cfg_, trainer_->resumed())) return;
  auto pulled = pull_state(network_->transport(), network_->live_neighbours(),
                           static_cast<std::size_t>(trainer_->parameter_count()), 10s);
  if (!pulled) {
    logging::warn("no neighbour sent its training state; starting from this peer's own initialisation");
    return;
  }
  // A restart (--resume without a checkpoint yet) goes on at the run's step, as a resumed
  // graph peer does (first_round): it must not train on alone after the others end.
  trainer_->adopt(std::move(*pulled), cfg_.checkpoint.resume ? PeerTrainer::Adopt::at_its_step
                                                             : PeerTrainer::Adopt::leave_last_epoch);
}

std::uint64_t PeerProcess::first_round() {
  // Rounds are numbered from the step: round = step / H. A peer that resumed from its
  // checkpoint is behind its neighbours by the time it was away; algorithms of
  // synchronous rounds (a graph round matches messages by round number) would then miss
  // every message, so it starts at the round its neighbour is in. And where it is well
  // behind the run it goes on from that neighbour's state and step, as a late joiner does
  // (behind_the_run: the steps it took since its checkpoint are lost either way).
  const std::uint64_t every = std::max<std::uint64_t>(cfg_.mixing.gossip_every, 1);
  const auto step = static_cast<std::uint64_t>(trainer_->position().step);
  if (!trainer_->resumed() || traits_ == nullptr || traits_->starts_together || cfg_.network.join.empty())
    return step / every;
  auto theirs = pull_state(network_->transport(), network_->live_neighbours(),
                           static_cast<std::size_t>(trainer_->parameter_count()), 10s);
  if (!theirs) {
    logging::warn("no neighbour told its step; rounds start from this peer's own step " +
                  std::to_string(step));
    return step / every;
  }
  const std::uint64_t their_step = theirs->state.step;
  const std::string from = theirs->from;
  if (behind_the_run(step, their_step, trainer_->steps_per_epoch(), every))
    trainer_->adopt(std::move(*theirs), PeerTrainer::Adopt::at_its_step);
  if (!traits_->needs_graph) return static_cast<std::uint64_t>(trainer_->position().step) / every;
  logging::info("rounds continue at " + std::to_string(their_step / every) + ", the round of '" + from +
                "' (this peer resumed at step " + std::to_string(step) + ")");
  return their_step / every;
}

void PeerProcess::start_mixer() {
  if (traits_ == nullptr || stopping()) return;  // --algo none: trains alone
  const std::uint64_t round = first_round();     // may take a neighbour's state: before the mixer sees ours
  mixer_.start(network_->transport(), network_->membership(), round, trainer_->parameters(),
               trainer_->shard_share(), mixed_tensors(trainer_->model(), trainer_->parameters().size()),
               static_cast<std::size_t>(trainer_->model().param_count()));
  // The communication thread answers partners from now on, not only after our first
  // step: a partner's first request would otherwise wait for it.
  trainer_->flush_mixing();
}

// ---- what other threads see ------------------------------------------------------------------

void PeerProcess::fill_counters(PeerMetrics& m) const {
  const algorithms::ExchangeLog::Totals t = mixer_.totals().exchanges;
  m.bytes_sent = t.bytes_sent;
  m.bytes_received = t.bytes_received;
  m.exchanges_ok = t.ok;
  m.exchanges_timed_out = t.timed_out;
  m.exchanges_implausible = t.implausible;
  m.exchanges_busy = t.busy;
  const std::uint64_t dropped = network_ ? network_->fill_counters(m) : 0;
  if (!network_) m.live_members = 1;
  m.exchanges_refused = t.failed + t.implausible + dropped;
}

StatusServer::Snapshot PeerProcess::http_snapshot() {
  StatusServer::Snapshot s = trainer_->status();
  fill_counters(s.metrics);
  s.status["members"] = network_->members_json();
  s.status["state"] = to_string(phase_.load());
  return s;
}

const char* PeerProcess::to_string(Phase phase) {
  switch (phase) {
    case Phase::joining:
      return "joining";
    case Phase::waiting:
      return "waiting";
    case Phase::held:
      return "held";
    case Phase::training:
      return "training";
    case Phase::paused:
      return "paused";
    case Phase::ending:
      return "ending";
  }
  return "unknown";
}

// ---- the control file ------------------------------------------------------------------------

void PeerProcess::apply_control(const emulation::PeerControl& control) {
  network_->apply_control(control);
  trainer_->set_slowdown(control.slowdown.value_or(cfg_.emulation.slowdown));
  if (control.stop) trainer_->end_training();  // the simulator's budget is spent
  {
    std::lock_guard lock(control_mutex_);
    held_ = control.hold;
    pause_at_ = control.pause_at;
  }
  control_changed_.notify_all();
  std::string blocked;
  for (const auto& id : control.blocked) blocked += (blocked.empty() ? "" : ", ") + id;
  logging::info("control: " + (blocked.empty() ? std::string("no peer blocked") : "blocked " + blocked) +
                ", slowdown " +
                std::to_string(control.slowdown.value_or(cfg_.emulation.slowdown)).substr(0, 5) +
                (control.link ? ", link " + emulation::to_string(*control.link) : "") +
                (control.hold ? ", hold" : "") + (control.stop ? ", stop" : "") +
                (control.pause_at ? ", pause at step " + std::to_string(*control.pause_at) : ""));
}

void PeerProcess::wait_for_release() {
  std::unique_lock lock(control_mutex_);
  if (!held_ || stopping()) return;
  // Everything is ready (joined, the world whole, the mixer up and answering partners):
  // the simulator, which reads this record, starts every peer at once by lifting the hold.
  phase_ = Phase::held;
  trainer_->write_record({{"type", "ready"}, {"peer", id_}, {"time_s", trainer_->seconds_since_start()}});
  logging::info("ready; held until every peer of the run is (--control-file)");
  // Bounded, so that a stop request (a flag set by a signal handler) is seen promptly.
  while (held_ && !stopping()) control_changed_.wait_for(lock, 200ms);
}

void PeerProcess::pause_if_asked() {
  std::unique_lock lock(control_mutex_);
  const std::int64_t step = trainer_->position().step;
  if (!pause_at_ || step < *pause_at_ || stopping()) return;
  const std::int64_t at = *pause_at_;
  trainer_->write_record(
      {{"type", "paused"}, {"peer", id_}, {"step", step}, {"time_s", trainer_->seconds_since_start()}});
  logging::info("paused after step " + std::to_string(step) + " (--control-file: pause-at " +
                std::to_string(at) + ")");
  phase_ = Phase::paused;
  // Bounded, so that a stop request (a flag set by a signal handler) is seen promptly.
  while (pause_at_ == at && !stopping()) control_changed_.wait_for(lock, 200ms);
  phase_ = Phase::training;
}

}  // namespace hearsay
