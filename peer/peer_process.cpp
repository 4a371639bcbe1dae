// PeerProcess: setting up, joining, the mixer and what other threads may see.
// The training loop is in peer_training.cpp.
#include "peer/peer_process.hpp"

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "gossip/network/emulation/emulated_transport.hpp"
#include "gossip/network/transport/keys.hpp"
#include "base/log.hpp"
#include "kernels/cpu/gemm.hpp"
#include "model/data/partition.hpp"
#include "model/zoo.hpp"

namespace hearsay {

namespace {

using namespace std::chrono_literals;

// A stable hash of the peer id, so that peers sharing --seed still shuffle their data and
// choose partners differently (and the same way again after a restart).
std::uint64_t id_hash(const std::string& id) { return stable_hash(id); }

// Where other machines reach us: the bound endpoint, with a wildcard host replaced by
// this machine's name (others cannot connect to 0.0.0.0).
std::string advertised(const std::string& bound) {
  // tcp://HOST:PORT[#KEY]; the host is bracketed when it is IPv6, and the key may hold ':'.
  if (bound.rfind("tcp://", 0) != 0 || bound.size() <= 6) return bound;
  const std::size_t close = bound[6] == '[' ? bound.find(']', 6) : std::string::npos;
  const std::size_t colon = bound.find(':', bound[6] == '[' ? close : 6);
  if (colon == std::string::npos) return bound;
  const std::string host = bound.substr(6, colon - 6);
  return is_wildcard_host(host) ? "tcp://" + this_host_name() + bound.substr(colon) : bound;
}

std::string joined(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

// The peer's transport: ZeroMQ, wrapped in link emulation when a link or fault setting
// asks for it (--link, --link-others, --link-peer; --control-file, whose partitions it cuts).
std::unique_ptr<transport::Transport> open_transport(const PeerConfig& cfg, const transport::ZmqOptions& o) {
  auto zmq = std::make_unique<transport::ZmqTransport>(o);
  const auto& e = cfg.emulation;
  const bool links = !e.link.empty() || !e.link_others.empty() || !e.link_peers.empty();
  if (!links && e.control_file.empty()) return zmq;
  emulation::EmulationOptions options;
  options.links = link_emulation(cfg);
  options.send_queue = o.send_queue;
  options.linger = o.linger;
  if (links)
    logging::info(options.links.enabled() ? "emulating links: " + emulation::describe(options.links)
                                          : "link emulation: the links given change nothing (" +
                                                emulation::describe(options.links) + ")");
  return std::make_unique<emulation::EmulatedTransport>(std::move(zmq), std::move(options));
}

}  // namespace

PeerProcess::PeerProcess(const PeerConfig& cfg, const std::atomic<bool>& stop)
    : cfg_(cfg),
      stop_(stop),
      id_(peer_id(cfg)),
      metrics_file_(cfg.output.metrics),
      progress_(cfg.output.log_every) {}

PeerProcess::~PeerProcess() {
  // Order matters: the mixer and the responder use the transport, membership too.
  control_.reset();
  mixer_.reset();
  responder_.reset();
  http_.reset();
  if (membership_) membership_->stop();
  membership_.reset();
  transport_.reset();
}

int PeerProcess::run() {
  load_data_and_model();
  resume_from_checkpoint();
  open_network();
  join_run();
  wait_for_ranks();
  // A gossip joiner trains at once, while the news of it spreads (a heartbeat or two): a
  // partner that does not know it yet refuses its request, which costs a round at most
  // half a step's compute, and the joiner's mixer takes in members as they come
  // (rebuild_mixer_if_members_changed). It used to wait for the view to be quiet for two
  // heartbeats first: 2 s of every gossip run's start-up (3.1 s against all-reduce's 1.1 s).
  if (!stopping()) pull_state_if_late();
  if (!stopping()) align_rounds_with_neighbours();
  build_mixer();
  wait_for_release();
  train();

  // The end, normal or asked for: everything mixed so far goes into the final state.
  progress_.clear();
  if (mixer_) {
    try {
      std::lock_guard lock(state_mutex_);
      mixer_->flush(session_->parameters());
    } catch (const std::exception& e) {
      logging::warn(std::string("last mixing round failed: ") + e.what());
    }
    retire_mixer();
  }
  log_interval(true);
  save_checkpoint("final");
  leave();
  write_final_record();
  return 0;
}

// ---- setting up ----------------------------------------------------------------------------

void PeerProcess::load_data_and_model() {
  const auto& t = cfg_.train;
  const auto& n = cfg_.network;
  const std::string dir = resolve_data_dir(t.data);
  const ShardSpec shard = n.rank >= 0 ? ShardSpec{n.rank, n.world} : ShardSpec{};
  const PartitionSpec partition = parse_partition(t.partition);
  // Only this peer's shard is kept, so data_.train is the shard itself, in shard order: N peers on
  // one box hold the training set once between them, not N times.
  data_ = load_mnist_format(dir,
                            [&](const Dataset& all) { return shard_indices(all, shard, partition, t.seed); });
  model_ = make_model(t.model);
  model_->init(t.seed);
  divergence_.emplace(model_->classes());
  if (data_.train.pixels() != model_->input_floats())
    throw std::runtime_error("the images in " + data_.source + " have " +
                             std::to_string(data_.train.pixels()) + " pixels, model '" + t.model +
                             "' expects " + std::to_string(model_->input_floats()));
  if (data_.train.count == 0)
    throw std::runtime_error("shard " + to_string(shard) + " of the training set is empty");
  data_seed_ = t.seed ^ 0x5eed5eed5eed5eedULL ^ id_hash(id_);
  steps_per_epoch_ = (data_.train.count + t.batch - 1) / t.batch;
  total_steps_ = steps_per_epoch_ * t.epochs;
  schedule_ = parse_lr_schedule(t.lr_schedule, t.lr, total_steps_);
  optimizer_ = make_optimizer(t, static_cast<std::size_t>(model_->param_count()));
  cpu::set_blas_threads(1);  // parallelism is over the batch, one BLAS thread per compute thread
  const int threads = t.threads > 0 ? t.threads : usable_cores();
  // A fixed rank is this peer's local rank too unless the launcher says otherwise.
  device_ = choose_device(parse_device(t.device), local_rank_from_environment(std::max(n.rank, 0)));
  session_ = make_training_session(device_.device, *model_, *optimizer_, {threads, t.batch});
  session_->bind_data(data_.train, data_.test);
  const std::string where =
      device_.device.is_cuda()
          ? device_.device.str() + " (" + device_.reason + "): " + session_->backend().describe()
          : std::to_string(threads) + " compute thread" + (threads == 1 ? "" : "s");
  std::fprintf(
      stderr,
      "hearsay peer %s: %s (%lld parameters, fingerprint %s), %s: %lld train examples (shard %s, %s), "
      "%lld test; %s, %s, batch %d, %d epoch%s of %lld steps\n",
      id_.c_str(), t.model.c_str(), static_cast<long long>(model_->param_count()),
      model_->fingerprint().c_str(), data_.source.c_str(), static_cast<long long>(data_.train.count),
      to_string(shard).c_str(), t.partition.c_str(), static_cast<long long>(data_.test.count), where.c_str(),
      schedule_->describe().c_str(), t.batch, t.epochs, t.epochs == 1 ? "" : "s",
      static_cast<long long>(steps_per_epoch_));
}

void PeerProcess::resume_from_checkpoint() {
  const auto& c = cfg_.checkpoint;
  if (c.dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(c.dir, ec);
  if (ec || !std::filesystem::is_directory(c.dir))
    throw std::runtime_error("cannot create the checkpoint directory '" + c.dir +
                             "': " + (ec ? ec.message() : "a file of that name is in the way"));
  next_checkpoint_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(c.every);
  if (!c.resume) return;
  const auto path = checkpoint_path(c.dir);
  if (!std::filesystem::exists(path)) {
    logging::warn("--resume: no checkpoint in '" + c.dir + "' yet; starting without one");
    return;
  }
  const TrainingState state = read_checkpoint(path, *model_);
  if (state.seed != cfg_.train.seed)
    throw PeerStartError("the checkpoint " + path.string() + " was written with --seed " +
                         std::to_string(state.seed) + ", this peer has --seed " +
                         std::to_string(cfg_.train.seed) +
                         ": resume with the seed of the run (it fixes the data order)");
  if (state.rng_state.size() == 1 && state.rng_state[0] != data_seed_)
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

void PeerProcess::open_network() {
  const auto& n = cfg_.network;
  transport::ZmqOptions o;
  o.id = id_;
  o.bind = n.listen;
  o.expect = {n.run, model_->fingerprint()};
  o.security.insecure = n.insecure;
  o.security.keys_dir = n.keys;
  o.security.authorized_dir = n.authorized;
  // The largest message is a state_reply: parameters and optimizer state (AdamW: 2x).
  o.max_payload_bytes = 4 * 3 * static_cast<std::uint64_t>(model_->param_count()) + 4096;
  transport_ = open_transport(cfg_, o);
  const auto& e = cfg_.emulation;
  slowdown_ = e.slowdown;
  if (!e.control_file.empty())
    control_ = std::make_unique<emulation::ControlFileWatcher>(
        e.control_file, [this](const emulation::PeerControl& c) { apply_control(c); },
        [](const std::string& why) { logging::warn("control file: " + why); });

  if (!cfg_.output.http.empty()) {
    http_ = std::make_unique<StatusServer>(cfg_.output.http, [this] { return http_snapshot(); });
    logging::info("serving /metrics and /status on port " + std::to_string(http_->port()));
  }

  membership::MembershipOptions m;
  m.seeds = join_addresses(n);
  m.advertised_address = advertised(transport_->address());
  m.heartbeat = std::chrono::duration_cast<Clock::duration>(cfg_.membership.heartbeat);
  m.suspect_after = std::chrono::duration_cast<Clock::duration>(cfg_.membership.suspect_after);
  m.dead_after = std::chrono::duration_cast<Clock::duration>(cfg_.membership.dead_after);
  m.rng_seed = cfg_.train.seed ^ id_hash(id_) ^ 0x6d656d62ULL;
  membership_ = std::make_unique<membership::Membership>(*transport_, m);
  membership_->set_on_change([this](const membership::MemberEvent& e) {
    using membership::Change;
    const auto level = e.change == Change::suspected || e.change == Change::died ? logging::Level::warn
                                                                                 : logging::Level::info;
    logging::write(level, "member '" + e.id + "' " + std::string(membership::to_string(e.change)) +
                              (e.change == membership::Change::joined ? " (" + e.address + ")" : ""));
    { std::lock_guard lock(members_mutex_); }
    members_changed_.notify_all();
  });
  membership_->start();
  responder_ = std::make_unique<StateResponder>(*transport_, [this] { return snapshot_for_neighbour(); });
  logging::info("peer '" + id_ + "' of run '" + n.run + "' listening at " + m.advertised_address);
}

void PeerProcess::join_run() {
  const auto& seeds = cfg_.network.join;
  if (seeds.empty()) {
    // One shell word: a CURVE address ends in a Z85 key, whose > < ( ) & $ ! # a shell reads.
    const std::string address = advertised(transport_->address());
    logging::info("first peer of the run: others join with --join " + shell_word(address));
    if (const auto hash = address.find('#'); hash != std::string::npos && !cfg_.network.keys.empty())
      logging::info("or with the key from its file: --join " + shell_word(address.substr(0, hash)) +
                    " --join-key " +
                    shell_word((std::filesystem::path(cfg_.network.keys) / transport::kPublicKeyFile).string()));
    return;
  }
  await_members(
      [&] { return membership_->live_members().size() >= 2 ? "" : "an answer from " + joined(seeds); },
      [&](const std::string&) {
        const auto c = membership_->counters();
        std::string why = "could not join the run: no peer answered from " + joined(seeds) + " within " +
                          format_duration(cfg_.membership.join_timeout) + ".\n";
        if (c.seed_failures > 0)
          why += "  The connection failed " + std::to_string(c.seed_failures) +
                 " time(s): is a hearsay peer running there, and is it reachable from this machine (host, "
                 "port, firewall)?\n";
        else
          why += "  Is a hearsay peer running at that address, and reachable from this machine?\n";
        why += "  Does it use the same --run ('" + cfg_.network.run + "') and --model ('" + cfg_.train.model +
               "')? It logs 'wrong_run' or 'wrong_fingerprint' for our messages otherwise.\n";
        why += cfg_.network.insecure
                   ? "  Does it use --insecure too?"
                   : "  Does each side's --authorized directory hold the other's public key?";
        return why;
      });
  if (!stopping())
    logging::info("joined the run: " + std::to_string(membership_->live_members().size()) + " live members");
}

void PeerProcess::wait_for_ranks() {
  if (!(uses_ranks(cfg_.gossip.algo) || cfg_.network.wait_for_world) || stopping()) return;
  const int world = cfg_.network.world;
  await_members(
      [&] {
        std::vector<std::string> missing;
        for (int r = 0; r < world; ++r) {
          const std::string id = rank_peer_id(r);
          const auto state = membership_->state_of(id);
          if (id != id_ && (!state || *state != membership::MemberState::alive)) missing.push_back(id);
        }
        return missing.empty() ? "" : joined(missing) + " to join";
      },
      [&](const std::string& missing) {
        const std::string who =
            uses_ranks(cfg_.gossip.algo) ? "--algo " + cfg_.gossip.algo : std::string("--wait-for-world");
        return who + " needs all " + std::to_string(world) + " ranks, and after " +
               format_duration(cfg_.membership.join_timeout) + " it still waits for " + missing +
               ": start them (with --join to a live peer), or lower --world";
      });
}

void PeerProcess::await_members(const std::function<std::string()>& missing,
                                const std::function<std::string(const std::string&)>& timed_out) {
  const auto timeout = std::chrono::duration_cast<Clock::duration>(cfg_.membership.join_timeout);
  const auto start = Clock::now();
  auto next_note = start + 5s;
  for (;;) {
    const auto version = membership_->version();
    const std::string what = missing();
    if (what.empty() || stopping()) return;
    const auto now = Clock::now();
    if (now - start >= timeout) throw PeerStartError(timed_out(what));
    if (now >= next_note) {
      logging::info("waiting for " + what + " (" + std::to_string(static_cast<int>(seconds(now - start))) +
                    " s)");
      next_note = now + 5s;
    }
    wait_for_member_change(version, 200ms);
  }
}

void PeerProcess::wait_for_member_change(std::uint64_t seen, Clock::duration at_most) {
  // Bounded, so that a stop request (a flag set by a signal handler) is seen promptly.
  std::unique_lock lock(members_mutex_);
  members_changed_.wait_for(lock, at_most, [&] { return membership_->version() != seen; });
}

std::vector<std::string> PeerProcess::live_neighbours() const {
  std::vector<std::string> ids = membership_->live_members();
  std::erase(ids, id_);
  return ids;
}

void PeerProcess::pull_state_if_late() {
  // Peers that start together (--wait-for-world, allreduce) all begin at --seed's
  // initialisation: a peer whose neighbour took a step or two before it got here is not
  // late, and pulling that neighbour's state would make the run depend on timing.
  if (resumed_ || cfg_.checkpoint.initial_state != "pull" || cfg_.network.join.empty() ||
      (traits_ != nullptr && traits_->starts_together) || cfg_.network.wait_for_world)
    return;
  auto pulled =
      pull_state(*transport_, live_neighbours(), static_cast<std::size_t>(model_->param_count()), 10s);
  if (!pulled) {
    logging::warn("no neighbour sent its training state; starting from this peer's own initialisation");
    return;
  }
  if (pulled->state.step == 0) return;  // the run has not started: everyone starts from --seed
  std::lock_guard lock(state_mutex_);
  std::ranges::copy(pulled->state.params, model_->params().begin());
  auto opt = optimizer_->state();
  if (pulled->state.optimizer_state.size() == opt.size())
    std::ranges::copy(pulled->state.optimizer_state, opt.begin());
  // Join the run where it is, so the learning-rate schedule agrees with the others'; at
  // least the last epoch is left to train.
  const auto last_epoch_start = total_steps_ - steps_per_epoch_;
  position_.step = std::min<std::int64_t>(static_cast<std::int64_t>(pulled->state.step), last_epoch_start);
  optimizer_->set_steps_taken(position_.step);
  params_changed_on_host();
  session_->optimizer_state_from_host();
  position_.epoch = position_.step / steps_per_epoch_ + 1;
  position_.epoch_step = position_.step % steps_per_epoch_;
  logging::info("started from the training state of '" + pulled->from + "' at step " +
                std::to_string(pulled->state.step) + " (this peer: epoch " + std::to_string(position_.epoch) +
                ", step " + std::to_string(position_.step) + ")");
  pulled_ = std::move(pulled);
}

void PeerProcess::align_rounds_with_neighbours() {
  // Rounds are numbered from the step: round = step / H. A peer that resumed from its
  // checkpoint is behind its neighbours by the time it was away; algorithms of
  // synchronous rounds (a graph round matches messages by round number) would then miss
  // every message, so it starts at the round its neighbours are in.
  const std::uint64_t every = std::max<std::uint64_t>(cfg_.gossip.gossip_every, 1);
  first_round_ = static_cast<std::uint64_t>(position_.step) / every;
  if (!resumed_ || !uses_graph(cfg_.gossip.algo) || cfg_.network.join.empty()) return;
  const auto theirs =
      pull_state(*transport_, live_neighbours(), static_cast<std::size_t>(model_->param_count()), 10s);
  if (!theirs) {
    logging::warn("no neighbour told its step; rounds start from this peer's own step " +
                  std::to_string(position_.step));
    return;
  }
  first_round_ = theirs->state.step / every;
  logging::info("rounds continue at " + std::to_string(first_round_) + ", the round of '" + theirs->from +
                "' (this peer resumed at step " + std::to_string(position_.step) + ")");
}

// ---- the mixer -----------------------------------------------------------------------------

algorithms::PeerSet PeerProcess::current_peer_set() const {
  algorithms::PeerSet peers;
  if (uses_ranks(cfg_.gossip.algo)) {
    for (int r = 0; r < cfg_.network.world; ++r) peers.ids.push_back(rank_peer_id(r));
    peers.self = cfg_.network.rank;
    return peers;
  }
  // Random gossip mixes with whoever is alive or suspect; dead members are left out
  // until they come back.
  for (const auto& m : membership_->members())
    if (m.state != membership::MemberState::dead) peers.ids.push_back(m.id);
  std::ranges::sort(peers.ids);
  peers.self = peers.rank_of(id_);
  return peers;
}

void PeerProcess::build_mixer() {
  const std::string& algo = cfg_.gossip.algo;
  if (traits_ == nullptr || stopping()) return;  // --algo none: trains alone
  if (uses_graph(algo) && !graph_) graph_ = topology::Topology::make(graph_spec(cfg_));
  algorithms::AlgorithmSetup setup;
  setup.name = algo;
  setup.transport = transport_.get();
  setup.peers = current_peer_set();
  setup.graph = graph_ ? &*graph_ : nullptr;
  setup.options = algorithm_options(cfg_);
  setup.options.partner_memory = partner_memory_;
  if (traits_->random_partners) setup.options.seed ^= id_hash(id_);
  mixer_peers_ = setup.peers.ids;
  seen_members_version_ = membership_->version();
  // A rebuilt mixer (gossip, new members) goes on from the rounds its predecessors ran. Its
  // working copy lives where the session's store puts it (pinned memory on a GPU); the
  // previous mixer is gone by now (retire_mixer), so the buffers are free.
  auto mixer = std::make_unique<algorithms::Mixer>(algorithms::make_algorithm(setup),
                                               static_cast<std::size_t>(model_->param_count()),
                                               first_round_ + rounds_retired_, &session_->parameters());
  {
    std::lock_guard live(live_mutex_);
    mixer_ = std::move(mixer);
  }
  // The communication thread answers partners from now on, not only after our first
  // step: a partner's first request would otherwise wait for it.
  std::lock_guard lock(state_mutex_);
  mixer_->flush(session_->parameters());
}

void PeerProcess::rebuild_mixer_if_members_changed() {
  if (!mixer_ || !traits_->follows_membership) return;
  const auto now = Clock::now();
  if (now < next_member_check_ || membership_->version() == seen_members_version_) return;
  next_member_check_ = now + 100ms;
  seen_members_version_ = membership_->version();
  const auto peers = current_peer_set();
  if (peers.ids == mixer_peers_) return;
  // A new member can only be a partner of an algorithm that knows it: retire the mixer
  // (everything it mixed goes into the parameters first) and start one over the new set.
  {
    std::lock_guard lock(state_mutex_);
    mixer_->flush(session_->parameters());
  }
  retire_mixer();
  build_mixer();
  if (mixer_) mixer_->training_resumes();  // none when a stop came meanwhile
  logging::info("mixing with " + std::to_string(mixer_peers_.size() - 1) + " other peer(s) now");
}

void PeerProcess::retire_mixer() {
  // What it did stays in the totals and in this interval's distances.
  rounds_retired_ += mixer_->stats().rounds;
  rounds_skipped_retired_ += mixer_->stats().rounds_skipped;
  for (const auto& r : mixer_->algorithm().exchanges().drain())
    if (r.distance >= 0) interval_distances_.push_back(r.distance);
  std::unique_ptr<algorithms::Mixer> retired;
  {
    std::lock_guard live(live_mutex_);
    retired_ += mixer_->algorithm().exchanges().totals();
    retired = std::move(mixer_);
  }
  retired.reset();  // joins its thread: outside the lock
}

// ---- what other threads see ------------------------------------------------------------------

TrainingSnapshot PeerProcess::snapshot_for_neighbour() {
  std::lock_guard lock(state_mutex_);
  TrainingSnapshot s;
  // On a GPU the parameters and the optimizer's state live there: fetch them first.
  session_->params_to_host();
  session_->optimizer_state_to_host();
  s.params.assign(model_->params().begin(), model_->params().end());
  const auto opt = optimizer_->state();
  s.optimizer_state.assign(opt.begin(), opt.end());
  s.step = static_cast<std::uint64_t>(position_.step);
  return s;
}

void PeerProcess::fill_counters(PeerMetrics& m) const {
  algorithms::ExchangeLog::Totals t;
  {
    std::lock_guard live(live_mutex_);
    t = retired_;
    if (mixer_) t += mixer_->algorithm().exchanges().totals();
  }
  m.bytes_sent = t.bytes_sent;
  m.bytes_received = t.bytes_received;
  m.exchanges_ok = t.ok;
  m.exchanges_timed_out = t.timed_out;
  m.exchanges_implausible = t.implausible;
  std::uint64_t dropped = 0;
  if (transport_) {
    const auto c = transport_->counters();
    m.dropped = c.dropped;
    dropped = c.total_dropped();
  }
  m.exchanges_refused = t.failed + t.implausible + dropped;
  m.live_members = membership_ ? static_cast<std::int64_t>(membership_->live_members().size()) : 1;
}

StatusServer::Snapshot PeerProcess::http_snapshot() {
  StatusServer::Snapshot s;
  {
    std::lock_guard lock(latest_mutex_);
    s.metrics = latest_;
    s.status = {
        {"run", cfg_.network.run},
        {"epochs", cfg_.train.epochs},
        {"test_acc", last_test_acc_ < 0 ? nlohmann::json(nullptr) : nlohmann::json(last_test_acc_)},
        {"test_loss", last_test_loss_ < 0 ? nlohmann::json(nullptr) : nlohmann::json(last_test_loss_)}};
  }
  // As they are now, not as of the last log interval (a scrape 3 s into a run said uptime
  // 0.26 s and step 1); the loss, accuracy, rate and distance are the last interval's.
  s.metrics.peer_id = id_;
  s.metrics.algo = cfg_.gossip.algo;
  s.metrics.time_s = seconds(Clock::now() - started_);
  {
    std::lock_guard lock(state_mutex_);
    s.metrics.step = position_.step;
  }
  fill_counters(s.metrics);
  nlohmann::json members = nlohmann::json::array();
  if (membership_) {
    for (const auto& m : membership_->members())
      members.push_back({{"id", m.id},
                         {"address", m.address},
                         {"state", membership::to_string(m.state)},
                         {"left", m.left},
                         {"self", m.self}});
  }
  s.status["members"] = std::move(members);
  return s;
}

void PeerProcess::apply_control(const emulation::PeerControl& control) {
  if (auto* emulated = dynamic_cast<emulation::EmulatedTransport*>(transport_.get()))
    emulated->set_blocked(control.blocked);  // always, with a control file (open_transport)
  slowdown_ = control.slowdown.value_or(cfg_.emulation.slowdown);
  {
    std::lock_guard lock(members_mutex_);
    held_ = control.hold;
    pause_at_ = control.pause_at;
  }
  members_changed_.notify_all();
  std::string blocked;
  for (const auto& id : control.blocked) blocked += (blocked.empty() ? "" : ", ") + id;
  logging::info("control: " + (blocked.empty() ? std::string("no peer blocked") : "blocked " + blocked) +
                ", slowdown " + std::to_string(slowdown_.load()).substr(0, 5) +
                (control.hold ? ", hold" : "") +
                (control.pause_at ? ", pause at step " + std::to_string(*control.pause_at) : ""));
}

void PeerProcess::wait_for_release() {
  std::unique_lock lock(members_mutex_);
  if (!held_ || stopping()) return;
  // Everything is ready (joined, the world whole, the mixer up and answering partners):
  // the simulator, which reads this record, starts every peer at once by lifting the hold.
  metrics_file_.write({{"type", "ready"}, {"peer", id_}, {"time_s", seconds(Clock::now() - started_)}});
  logging::info("ready; held until every peer of the run is (--control-file)");
  // Bounded, so that a stop request (a flag set by a signal handler) is seen promptly.
  while (held_ && !stopping()) members_changed_.wait_for(lock, 200ms);
}

void PeerProcess::pause_if_asked() {
  std::unique_lock lock(members_mutex_);
  if (!pause_at_ || position_.step < *pause_at_ || stopping()) return;
  const std::int64_t at = *pause_at_;
  metrics_file_.write({{"type", "paused"},
                       {"peer", id_},
                       {"step", position_.step},
                       {"time_s", seconds(Clock::now() - started_)}});
  logging::info("paused after step " + std::to_string(position_.step) + " (--control-file: pause-at " +
                std::to_string(at) + ")");
  // Bounded, so that a stop request (a flag set by a signal handler) is seen promptly.
  while (pause_at_ == at && !stopping()) members_changed_.wait_for(lock, 200ms);
}

void PeerProcess::leave() {
  responder_.reset();
  if (membership_) membership_->leave();
}

}  // namespace hearsay
