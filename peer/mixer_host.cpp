#include "peer/mixer_host.hpp"

#include <algorithm>
#include <utility>

#include "base/log.hpp"
#include "base/rng.hpp"

namespace hearsay {

MixerHost::MixerHost(const PeerConfig& cfg, const algorithms::AlgorithmTraits* traits, std::string id,
                     OptimizerOwner optimizer)
    : cfg_(cfg), traits_(traits), id_(std::move(id)), optimizer_(optimizer) {}

MixerHost::~MixerHost() { stop(); }

algorithms::PeerSet MixerHost::peer_set(const membership::Membership& members) const {
  algorithms::PeerSet peers;
  if (traits_->needs_ranks) {
    for (int r = 0; r < cfg_.network.world; ++r) peers.ids.push_back(rank_peer_id(r));
    peers.self = cfg_.network.rank;
    return peers;
  }
  // Random gossip mixes with whoever is alive or suspect; dead members are left out
  // until they come back.
  for (const auto& m : members.members())
    if (m.state != membership::MemberState::dead) peers.ids.push_back(m.id);
  std::ranges::sort(peers.ids);
  peers.self = peers.rank_of(id_);
  return peers;
}

std::unique_ptr<algorithms::Algorithm> make_peer_algorithm(
    const PeerConfig& cfg, const algorithms::AlgorithmTraits& traits, const std::string& id,
    transport::Transport& transport, algorithms::PeerSet peers, const topology::Topology* graph,
    std::shared_ptr<algorithms::PartnerMemory> memory, double shard_share,
    std::vector<compress::TensorShape> tensors, OptimizerOwner optimizer, std::size_t parameter_values) {
  algorithms::AlgorithmSetup setup;
  setup.name = std::string(traits.name);
  setup.transport = &transport;
  setup.graph = graph;
  setup.peers = std::move(peers);
  setup.options = algorithm_options(cfg);
  setup.options.partner_memory = std::move(memory);
  setup.options.shard_share = shard_share;
  setup.options.tensors = std::move(tensors);
  if (quasi_global_momentum(cfg) && optimizer == OptimizerOwner::caller)
    throw std::invalid_argument(
        "--momentum-kind quasi-global runs the momentum in hearsay's mixer, and a PyTorch peer's optimizer "
        "is its own: use --momentum-kind local here");
  if (optimizer == OptimizerOwner::hearsay && algorithm_applies_momentum(cfg)) {
    setup.options.momentum = cfg.train.momentum;
    setup.options.nesterov = cfg.train.nesterov;
    setup.options.quasi_global_momentum = quasi_global_momentum(cfg);
    setup.options.momentum_values = parameter_values;
  }
  // Peers sharing --seed still draw their partners differently.
  if (traits.random_partners) setup.options.seed ^= stable_hash(id);
  return algorithms::make_algorithm(setup);
}

namespace {

compress::TensorShape as_matrix(std::span<const std::int64_t> dims) {
  compress::TensorShape t{1, 1};
  for (std::size_t i = 0; i < dims.size(); ++i)
    (i == 0 ? t.rows : t.cols) *= static_cast<std::uint64_t>(dims[i]);
  return t;
}

std::vector<compress::TensorShape> if_tiling(std::vector<compress::TensorShape> tensors, std::size_t n) {
  std::uint64_t sum = 0;
  for (const auto& t : tensors) sum += t.size();
  if (sum != n) tensors.clear();
  return tensors;
}

}  // namespace

std::vector<compress::TensorShape> mixed_tensors(const Model& model, std::size_t n) {
  std::vector<compress::TensorShape> out;
  const auto add = [&](const std::vector<NamedTensor>& tensors) {
    for (const auto& t : tensors) {
      std::vector<std::int64_t> dims;
      for (int d = 0; d < t.shape.rank(); ++d) dims.push_back(t.shape[d]);
      out.push_back(as_matrix(dims));
    }
  };
  add(model.named_params());
  if (n != static_cast<std::size_t>(model.param_count())) add(model.named_buffers());
  return if_tiling(std::move(out), n);
}

std::vector<compress::TensorShape> mixed_tensors(const ModelLayout& layout, std::size_t n) {
  std::vector<compress::TensorShape> out;
  for (const auto& t : layout) out.push_back(as_matrix(t.shape));
  return if_tiling(std::move(out), n);
}

void MixerHost::start(transport::Transport& transport, const membership::Membership& members,
                      std::uint64_t first_round, ParameterStore& params, double shard_share,
                      std::vector<compress::TensorShape> tensors, std::size_t parameter_values) {
  if (traits_ == nullptr || mixer_) return;  // --algo none: trains alone
  if (traits_->needs_graph && !graph_) graph_ = topology::Topology::make(graph_spec(cfg_));
  {
    std::lock_guard lock(mutex_);
    algorithms::PeerSet peers = peer_set(members);
    peers_ = peers.ids;
    if (traits_->follows_membership)
      logging::info("mixing with " + std::to_string(peers_.size() - 1) + " other peer(s) now");
    // The working copy lives where the store puts it (pinned memory on a GPU).
    mixer_ = std::make_unique<algorithms::Mixer>(
        make_peer_algorithm(cfg_, *traits_, id_, transport, std::move(peers), graph_ ? &*graph_ : nullptr,
                            partner_memory_, shard_share, std::move(tensors), optimizer_, parameter_values),
        params.size(), first_round, &params);
  }
  // A change that came while the set above was taken reached no mixer: look again.
  members_changed(members);
}

void MixerHost::members_changed(const membership::Membership& members) {
  if (traits_ == nullptr || !traits_->follows_membership) return;
  // Under the lock, so that two callers (membership's thread, start()) cannot hand the
  // mixer their sets in the order opposite to the one they took them in.
  std::lock_guard lock(mutex_);
  if (!mixer_) return;  // start() takes the set then
  algorithms::PeerSet peers = peer_set(members);
  if (peers.ids == peers_) return;
  peers_ = peers.ids;
  const std::size_t others = peers_.size() - 1;
  mixer_->set_peers(std::move(peers));
  logging::info("mixing with " + std::to_string(others) + " other peer(s) now");
}

void MixerHost::training_resumes() {
  if (running()) mixer_->training_resumes();
}

void MixerHost::after_update(ParameterStore& params, std::uint64_t step) {
  if (running()) mixer_->after_step(params, step);
}

void MixerHost::flush(ParameterStore& params) {
  if (running()) mixer_->flush(params);
}

void MixerHost::stop() noexcept {
  if (!mixer_ || stopped_) return;
  stopped_ = true;
  mixer_->stop();  // joins its thread: outside mutex_, which membership's thread may want
}

std::vector<double> MixerHost::drain_distances() {
  std::vector<double> out;
  if (!mixer_) return out;
  for (const auto& r : mixer_->algorithm().exchanges().drain())
    if (r.distance >= 0) out.push_back(r.distance);
  return out;
}

MixerHost::Totals MixerHost::totals() const {
  std::lock_guard lock(mutex_);
  Totals t;
  if (!mixer_) return t;
  t.exchanges = mixer_->algorithm().exchanges().totals();
  const auto stats = mixer_->stats();
  t.rounds = stats.rounds;
  t.rounds_skipped = stats.rounds_skipped;
  return t;
}

}  // namespace hearsay
