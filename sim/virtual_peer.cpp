#include "sim/virtual_peer.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include "base/log.hpp"
#include "gossip/mixing/algorithms/partner_timing.hpp"
#include "gossip/mixing/algorithms/registry.hpp"
#include "gossip/mixing/topology/topology.hpp"
#include "kernels/cpu/gemm.hpp"
#include "model/data/partition.hpp"
#include "model/trainer.hpp"
#include "model/zoo.hpp"
#include "peer/mixer_host.hpp"
#include "peer/run_output.hpp"
#include "peer/state_transfer.hpp"
#include "peer/training_flags.hpp"
#include "sim/peer_setup.hpp"

namespace hearsay::sim {
namespace {

// Where a step's forward and backward run: a model of the peer's architecture with its
// activations' workspace, one per compute thread and model name. A thousand peers share a
// few of these instead of holding a workspace each (5 MB for lenet at batch 32, 5 GB for
// 1024 peers): the peer's state is copied in, the gradients (and the running statistics a
// training pass updates) copied out. Same Trainer, same arithmetic as the peer's own.
struct ComputeScratch {
  std::unique_ptr<Model> model;
  std::unique_ptr<Trainer> trainer;
  std::vector<float> x;
  std::vector<std::uint8_t> y;
};

ComputeScratch& scratch_for(const std::string& model_name, std::int64_t max_batch) {
  thread_local std::map<std::pair<std::string, std::int64_t>, ComputeScratch> scratch;
  ComputeScratch& s = scratch[{model_name, max_batch}];
  if (!s.model) {
    s.model = make_model(model_name);
    s.trainer = std::make_unique<Trainer>(*s.model, 1, max_batch);
    s.x.resize(static_cast<std::size_t>(max_batch * s.model->input_floats()));
    s.y.resize(static_cast<std::size_t>(max_batch));
  }
  return s;
}

// The CPU session of a peer process, except that a step's computation costs its modelled
// time in virtual time: it runs on the scheduler's compute pool (in that thread's
// ComputeScratch) while other fibers go on. The peer's own session (built for batches of
// one, so with a tiny workspace) keeps the parameters, gradients and optimizer.
class VirtualTimeSession final : public TrainingSession {
 public:
  VirtualTimeSession(std::unique_ptr<TrainingSession> inner, Model& model, std::string model_name,
                     std::int64_t max_batch, fiber::Scheduler& scheduler,
                     std::function<fiber::Scheduler::duration()> cost)
      : inner_(std::move(inner)),
        model_(model),
        model_name_(std::move(model_name)),
        max_batch_(max_batch),
        scheduler_(scheduler),
        cost_(std::move(cost)) {}
  const Backend& backend() const override { return inner_->backend(); }
  // train: the whole training set, shared by all peers; shard: the rows of this peer's
  // shard, which the loop's indices index (no copy of the shard's images per peer).
  void bind_shard(const Dataset& train, std::vector<std::int64_t> shard, const Dataset& test) {
    train_ = &train;
    shard_ = std::move(shard);
    inner_->bind_data(train, test);
  }
  void bind_data(const Dataset&, const Dataset&) override {
    throw std::logic_error("virtual peer: bind_shard, not bind_data");
  }
  BatchStats compute_gradients(std::span<const std::int64_t> indices) override {
    if (static_cast<std::int64_t>(indices.size()) > max_batch_)
      throw std::invalid_argument("virtual peer: a batch over --batch");
    BatchStats stats;
    scheduler_.compute(cost_(), [&] { stats = compute_here(indices); });
    return stats;
  }
  void apply_update(float lr) override { inner_->apply_update(lr); }
  BatchStats evaluate() override { return inner_->evaluate(); }
  ParameterStore& parameters() override { return inner_->parameters(); }
  void params_to_host() override { inner_->params_to_host(); }
  void params_from_host() override { inner_->params_from_host(); }
  void optimizer_state_to_host() override { inner_->optimizer_state_to_host(); }
  void optimizer_state_from_host() override { inner_->optimizer_state_from_host(); }

 private:
  BatchStats compute_here(std::span<const std::int64_t> indices) {
    ComputeScratch& s = scratch_for(model_name_, max_batch_);
    std::ranges::copy(model_.state(), s.model->state().begin());
    rows_.resize(indices.size());
    for (std::size_t i = 0; i < indices.size(); ++i)
      rows_[i] = shard_.at(static_cast<std::size_t>(indices[i]));
    gather_batch(*train_, rows_, s.x.data(), s.y.data());
    const BatchStats stats =
        s.trainer->compute_gradients(s.x.data(), s.y.data(), static_cast<std::int64_t>(indices.size()));
    std::ranges::copy(s.model->grads(), model_.grads().begin());
    const auto params = static_cast<std::size_t>(model_.param_count());
    std::ranges::copy(s.model->state().subspan(params),
                      model_.state().begin() + static_cast<std::ptrdiff_t>(params));
    return stats;
  }

  std::unique_ptr<TrainingSession> inner_;
  Model& model_;
  const std::string model_name_;
  const std::int64_t max_batch_;
  fiber::Scheduler& scheduler_;
  std::function<fiber::Scheduler::duration()> cost_;
  const Dataset* train_ = nullptr;
  std::vector<std::int64_t> shard_, rows_;
};

}  // namespace

VirtualPeer::VirtualPeer(int rank, const std::vector<std::string>& args, VirtualPeerLinks links,
                         std::shared_ptr<const VirtualCheckpoint> resume)
    : rank_(rank), cfg_(parse_peer_command_line(args)), id_(peer_id(cfg_)), links_(std::move(links)) {
  const auto& t = cfg_.train;
  const TrainTest& all = *links_.data;
  const auto indices =
      shard_indices(all.train, ShardSpec{rank, cfg_.network.world}, parse_partition(t.partition), t.seed);
  shard_examples_ = static_cast<std::int64_t>(indices.size());
  if (shard_examples_ == 0)
    throw std::runtime_error("shard " + std::to_string(rank) + " of the training set is empty: fewer peers");
  model_ = make_model(t.model);
  model_->init(init_seed(t));
  watch_.emplace(model_->classes());
  RunPlan plan = plan_run(cfg_, id_, shard_examples_, all.train.count, /*ended_by_simulator=*/true);
  order_ = std::move(plan.order);
  steps_per_epoch_ = plan.steps_per_epoch;
  progress_ = std::move(plan.progress);
  shard_share_ = plan.shard_share;
  budget_ = std::move(plan.budget);
  schedule_ = std::move(plan.schedule);
  optimizer_ = make_optimizer(optimizer_settings(cfg_), static_cast<std::size_t>(model_->param_count()));
  cpu::set_blas_threads(1);
  // Batches of one: its workspace is never used for training (VirtualTimeSession).
  auto cpu = make_training_session(Device{}, *model_, *optimizer_, {1, 1, cfg_.mixing.bn_stats == "mix"});
  auto session =
      std::make_unique<VirtualTimeSession>(std::move(cpu), *model_, t.model, t.batch, *links_.scheduler,
                                           [this] { return links_.step_cost(rank_); });
  session->bind_shard(all.train, indices, all.test);
  session_ = std::move(session);
  if (resume) resume_from(*resume);
}

void VirtualPeer::resume_from(const VirtualCheckpoint& c) {
  std::ranges::copy(c.state, model_->state().begin());
  auto opt = optimizer_->state();
  if (c.optimizer.size() == opt.size()) std::ranges::copy(c.optimizer, opt.begin());
  position_ = c.position;
  optimizer_->set_steps_taken(position_.step);
  first_round_ = round_of_step(position_.step);
  checkpoint_ = std::make_shared<VirtualCheckpoint>(c);
}

void VirtualPeer::continue_from(const VirtualPeer& neighbour) {
  const algorithms::AlgorithmTraits* traits = algorithms::find_algorithm(cfg_.mixing.algo);
  if (traits == nullptr || traits->starts_together) return;
  if (traits->needs_graph) first_round_ = round_of_step(neighbour.steps());
  const std::int64_t step = std::min(neighbour.steps(), budget_->planned_steps());
  if (!behind_the_run(static_cast<std::uint64_t>(position_.step), static_cast<std::uint64_t>(step),
                      steps_per_epoch_, std::max<std::uint64_t>(cfg_.mixing.gossip_every, 1)))
    return;
  const std::vector<float> theirs = neighbour.state();
  std::ranges::copy(theirs, model_->state().begin());
  const auto their_optimizer = neighbour.optimizer_->state();
  auto opt = optimizer_->state();
  if (their_optimizer.size() == opt.size()) std::ranges::copy(their_optimizer, opt.begin());
  position_.step = step;
  position_.epoch = step / steps_per_epoch_ + 1;
  position_.epoch_step = step % steps_per_epoch_;
  optimizer_->set_steps_taken(step);
  if (!traits->needs_graph) first_round_ = round_of_step(step);
}

std::uint64_t VirtualPeer::round_of_step(std::int64_t step) const {
  // As a peer process numbers its rounds: round = step / H (PeerProcess::first_round).
  return static_cast<std::uint64_t>(step) / std::max<std::uint64_t>(cfg_.mixing.gossip_every, 1);
}

void VirtualPeer::checkpoint_if_due() {
  if (cfg_.checkpoint.every == Duration::zero()) return;  // --checkpoint-every 0: only a run with restarts checkpoints
  const auto now = links_.scheduler->now();
  if (now < next_checkpoint_) return;
  next_checkpoint_ = now + std::chrono::duration_cast<fiber::Scheduler::duration>(cfg_.checkpoint.every);
  if (disk_full_) return;  // the write fails; the last checkpoint stays, the next one retries
  auto c = std::make_shared<VirtualCheckpoint>();
  c->state = state();
  const auto opt = optimizer_->state();
  c->optimizer.assign(opt.begin(), opt.end());
  c->position = position_;
  checkpoint_ = std::move(c);
}

VirtualPeer::~VirtualPeer() = default;

void VirtualPeer::start() {
  links_.scheduler->spawn(id_ + "/train", [this] { run(); });
}

void VirtualPeer::build_mixer() {
  transport::InprocOptions o;
  o.id = id_;
  o.expect = {cfg_.network.run, model_->fingerprint()};
  o.max_payload_bytes = 4 * 3 * static_cast<std::uint64_t>(model_->state_count()) + 4096;
  emulation::EmulationOptions e;
  e.links = link_emulation(cfg_);
  e.links_may_change = cfg_.emulation.link_may_change;
  // --link-hold-at is ignored: in virtual time nothing real adds to the emulated delay, so
  // where it is held changes nothing, and the sender's delay line keeps the runs as they were.
  transport_ = std::make_unique<emulation::EmulatedTransport>(
      std::make_unique<transport::InprocTransport>(links_.fabric, o), e);
  transport_->set_progress(progress_);
  transport_->set_blocked(blocked_);  // what the run said before this fiber got here
  if (e.links_may_change) transport_->set_own_link(own_link_);
  const algorithms::AlgorithmTraits* traits = algorithms::find_algorithm(cfg_.mixing.algo);
  if (traits == nullptr) throw std::invalid_argument("virtual peer: unknown algorithm " + cfg_.mixing.algo);
  follows_membership_ = traits->follows_membership;
  if (traits->needs_graph) graph_ = topology::Topology::make(graph_spec(cfg_));
  algorithms::PeerSet peers;
  for (int r = 0; r < cfg_.network.world; ++r) peers.ids.push_back(rank_peer_id(r));
  if (!traits->needs_ranks) std::ranges::sort(peers.ids);  // as membership lists them
  peers.self = peers.rank_of(id_);
  for (int r = 0; r < cfg_.network.world; ++r)
    if (r != rank_)
      transport_->connect(rank_peer_id(r), transport::InprocFabric::address_for(rank_peer_id(r)));
  auto algorithm =
      make_peer_algorithm(cfg_, *traits, id_, *transport_, std::move(peers), graph_ ? &*graph_ : nullptr,
                          std::make_shared<algorithms::PartnerMemory>(), shard_share_,
                          mixed_tensors(*model_, session_->parameters().size()), OptimizerOwner::hearsay,
                          static_cast<std::size_t>(model_->param_count()));
  mixer_ = std::make_unique<algorithms::Mixer>(std::move(algorithm), session_->parameters().size(),
                                               first_round_, &session_->parameters());
}

TrainingHooks VirtualPeer::hooks() {
  TrainingHooks h;
  h.epoch_order = [this](std::int64_t epoch) -> const std::vector<std::int64_t>& {
    return order_->of(epoch);
  };
  h.should_stop = [this] { return killed_ || budget_->ended(); };
  h.after_gradients = [this](const BatchStats& s, std::chrono::nanoseconds) {
    if (!std::isfinite(s.loss_sum)) {
      diverged_ = true;
      throw std::runtime_error("the loss became " + std::to_string(s.loss_sum) + " at step " +
                               std::to_string(position_.step + 1));
    }
    // As a peer process watches its loss at every metrics interval (DivergenceWatch): here
    // every kWatchSteps steps, their mean.
    watched_ += s;
    if (++watched_steps_ < kWatchSteps) return;
    const double loss = watched_.mean_loss();
    watched_ = {};
    watched_steps_ = 0;
    if (auto d = watch_->observe(position_.step + 1, loss, -1)) {
      diverged_ = true;
      throw std::runtime_error(d->what + " at step " + std::to_string(d->step) +
                               (d->began_at < d->step
                                    ? " (rising from step " + std::to_string(d->began_at) + ")"
                                    : std::string()));
    }
  };
  h.after_update = [this](const StepReport& r) {
    if (killed_) return;  // dead since the step began: it mixes no more
    mixer_->after_step(session_->parameters(), static_cast<std::uint64_t>(r.position.step));
  };
  h.after_step = [this](const StepReport& r) {
    budget_->after_step(position_.step, transport::ProgressEstimate::Clock::now());
    if (!killed_) {
      snapshot_if_due();
      checkpoint_if_due();
    }
    links_.after_step(rank_, r.stats.count);
  };
  return h;
}

void VirtualPeer::run() {
  try {
    build_mixer();
    // As a peer process (PeerProcess::start_mixer): the mixer starts from the parameters
    // before the first step, so that partners are answered from now on and every local
    // step, the first ones too, is a step the mixer sees (and weighs by the shard).
    mixer_->flush(session_->parameters());
    mixer_->training_resumes();
    const auto& t = cfg_.train;
    budget_->started(transport::ProgressEstimate::Clock::now());
    run_training(*session_, *schedule_, budget_->loop_epochs(), t.batch, position_, hooks());
    ended_at_ = links_.scheduler->now();
    if (!killed_) mixer_->flush(session_->parameters());
  } catch (const std::exception& e) {
    if (!killed_) failure_ = e.what();
    ended_at_ = links_.scheduler->now();
  }
  if (mixer_) {
    mixer_->stop();
    bytes_sent_ = mixer_->algorithm().exchanges().totals().bytes_sent;
    push_sum_ = push_sum_ledger(mixer_->algorithm(), rank_, cfg_.network.world);
  }
  ended_ = true;
  links_.ended(rank_);
  // The mixer's and the link's fibers end before the transport they use goes, and the
  // transport before a restart attaches a new one under this id.
  mixer_.reset();
  transport_.reset();
  gone_ = true;
  if (links_.gone) links_.gone(rank_);
}

void VirtualPeer::snapshot_if_due() {
  // As a peer process: right after a fixed step, with everything mixed so far.
  const auto due =
      snapshot_due(next_snapshot_, cfg_.checkpoint.snapshot_every, steps_per_epoch_, position_.step);
  if (!due) return;
  const std::int64_t k = *due;
  mixer_->flush(session_->parameters());
  snapshots_[k] = Snapshot{state(), bytes_sent(), links_.scheduler->now()};
  links_.snapshot_taken(rank_, k);
}

std::uint64_t VirtualPeer::bytes_sent() const {
  return mixer_ ? mixer_->algorithm().exchanges().totals().bytes_sent : bytes_sent_;
}

std::uint64_t VirtualPeer::sent_at_snapshot(std::int64_t k) const {
  const auto it = snapshots_.find(k);
  return it != snapshots_.end() ? it->second.bytes : bytes_sent();
}

std::vector<float> VirtualPeer::take_snapshot(std::int64_t k) {
  auto node = snapshots_.extract(k);
  return node.empty() ? std::vector<float>{} : std::move(node.mapped().state);
}

void VirtualPeer::kill() {
  if (killed_ || ended_) return;
  killed_ = true;
  links_.fabric->kill(id_);
}

void VirtualPeer::peer_left(const std::string& id, std::int64_t steps) {
  if (progress_) progress_->left(id, static_cast<std::uint64_t>(std::max<std::int64_t>(steps, 0)));
}

void VirtualPeer::set_live_peers(const std::vector<std::string>& sorted_ids) {
  if (!follows_membership_ || !mixer_ || ended_) return;
  algorithms::PeerSet peers;
  peers.ids = sorted_ids;
  peers.self = peers.rank_of(id_);
  if (peers.self < 0) return;
  mixer_->set_peers(std::move(peers));
}

void VirtualPeer::set_own_link(std::optional<emulation::LinkSpec> link) {
  own_link_ = link;
  if (transport_ && cfg_.emulation.link_may_change) transport_->set_own_link(own_link_);
}

void VirtualPeer::set_blocked(std::vector<std::string> ids) {
  blocked_ = std::move(ids);
  if (transport_) transport_->set_blocked(blocked_);
}

std::span<const float> VirtualPeer::state_view() const { return model_->state(); }

std::vector<float> VirtualPeer::state() const {
  const auto s = model_->state();
  return {s.begin(), s.end()};
}

}  // namespace hearsay::sim
