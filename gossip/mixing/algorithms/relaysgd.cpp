#include "gossip/mixing/algorithms/relaysgd.hpp"

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>

namespace hearsay::algorithms {

RelaySgd::RelaySgd(transport::Transport& transport, PeerSet peers, AlgorithmOptions options,
                   const topology::Topology& graph)
    : Algorithm(transport, std::move(peers), options), exchange_(transport_, peers_, options_, log_) {
  check_graph_matches("relaysgd", graph, peers_.size());
  const topology::Tree tree = topology::spanning_tree(graph);
  neighbours_ = tree[static_cast<std::size_t>(peers_.self)];
  // Behind neighbour j: the peers nearer to j than to us, j itself included.
  const std::vector<int> ours = topology::tree_hops(tree, peers_.self);
  for (const int j : neighbours_) {
    const std::vector<int> theirs = topology::tree_hops(tree, j);
    int behind = 0;
    for (std::size_t v = 0; v < ours.size(); ++v) behind += theirs[v] < ours[v];
    behind_.push_back(behind);
  }
  diameter_ = topology::tree_diameter(tree);
  const auto n = static_cast<double>(peers_.size());
  correction_ = 1 / n + topology::tree_distance_sum(tree) / (n * n);
  relayed_.resize(neighbours_.size());
  exchange_.take_with([this](const transport::Message& m, int rank) { return take(m, rank); });
}

ParamsExchange::Taken RelaySgd::take(const transport::Message& message, int rank) {
  const auto at = std::lower_bound(neighbours_.begin(), neighbours_.end(), rank);
  if (at == neighbours_.end() || *at != rank) return {"relaysgd: not a neighbour on the spanning tree"};
  const auto k = static_cast<std::size_t>(at - neighbours_.begin());
  const std::uint64_t count = message.header().base;
  if (message.header().dtype == wire::Dtype::compressed)
    return {
        "sent a compressed difference, and relaysgd relays values: do the peers' --compress and --algo "
        "agree?"};
  if (count == 0 || count > static_cast<std::uint64_t>(behind_[k]))
    return {"relayed a sum of " + std::to_string(count) + " models, but " + std::to_string(behind_[k]) +
            " peers lie on its side of the spanning tree: do the peers' --graph and --world agree?"};
  Relayed& r = relayed_[k];
  r.sum.resize(current_.size());
  message.decode_into(r.sum);
  r.heard = true;
  r.round = message.header().step;
  r.count = count;
  // How far the mean of the models it relays is from ours.
  double d2 = 0;
  const double c = static_cast<double>(count);
  for (std::size_t i = 0; i < r.sum.size(); ++i) {
    const double d = static_cast<double>(r.sum[i]) / c - static_cast<double>(current_[i]);
    d2 += d * d;
  }
  return {std::nullopt, std::sqrt(d2)};
}

bool RelaySgd::usable(std::size_t k, std::uint64_t round) const {
  const Relayed& r = relayed_[k];
  if (!r.heard || r.round > round || round - r.round > kRecentRounds || r.sum.size() != current_.size())
    return false;
  // A neighbour the transport says is gone sent its last: its sum stands for nobody now.
  return r.round == round || !exchange_.left_out(neighbours_[k]);
}

void RelaySgd::check_side(std::size_t k, std::uint64_t round) const {
  const Relayed& r = relayed_[k];
  if (rounds_ < r.whole_at + kGoneRounds + (r.heard ? 0 : kFirstRounds)) return;
  const int rank = neighbours_[k];
  const std::string& id = peers_.id_of(rank);
  // A neighbour that said bye ended its run (its budget, or a failure of its own, which
  // its run reports): the peers left go on with what they hear, as at the end of any run.
  if (const transport::ProgressEstimate* progress = transport_.progress(); progress && progress->has_left(id))
    return;
  const std::string lasting = " for " + std::to_string(rounds_ - r.whole_at) + " rounds";
  const std::string advice =
      ", and RelaySGD cannot average across a cut in its spanning tree: restart the peer, or train with an "
      "algorithm that mixes around a lost peer (dpsgd, d2, tracking)";
  if (!usable(k, round)) {
    const std::string why = exchange_.left_out_why(rank);
    throw transport::PeerError(
        why.empty() ? transport::PeerFailure::no_reply : transport::PeerFailure::disconnected, id,
        transport_.address_of(id),
        "relaysgd round " + std::to_string(round) + ": nothing from this tree neighbour" + lasting +
            (why.empty() ? "" : " (" + why + ")") + "; " + std::to_string(behind_[k]) +
            " peers lie behind it on the spanning tree" + advice);
  }
  throw std::runtime_error("relaysgd round " + std::to_string(round) + ": the models of " +
                           std::to_string(static_cast<std::uint64_t>(behind_[k]) - r.count) + " of the " +
                           std::to_string(behind_[k]) + " peers behind tree neighbour " + id +
                           " have not come" + lasting + ": the tree is cut beyond it" + advice);
}

RoundResult RelaySgd::mix(std::span<float> params, std::uint64_t mixer_round) {
  const std::uint64_t round = exchange_.catch_up(mixer_round);
  const std::size_t n = params.size();
  const auto peers = static_cast<double>(peers_.size());
  current_ = params;
  if (rounds_ == 0) {  // a model takes up to the tree's diameter in rounds to come
    for (Relayed& r : relayed_) r.whole_at = static_cast<std::uint64_t>(diameter_);
  }
  // x_{t+½} = x_t + κ u_t when the last round heard every model, or all but one (the header).
  if (last_.size() == n && heard_ + 1 >= static_cast<std::uint64_t>(peers_.size()))
    for (std::size_t i = 0; i < n; ++i)
      params[i] = last_[i] + static_cast<float>(correction_) * (params[i] - last_[i]);
  // m_{i→j} = x_i + Σ_{k ≠ j} m_{k→i}, with what came last round, and its count. Each sum is
  // added up afresh rather than as the total less m_{j→i}: a leaf's message would lose the
  // precision of the whole network's sum.
  std::vector<char> relay(neighbours_.size());
  for (std::size_t k = 0; k < neighbours_.size(); ++k) relay[k] = usable(k, round);
  std::vector<ParamsExchange::Outgoing> outgoing;
  for (std::size_t j = 0; j < neighbours_.size(); ++j) {
    std::vector<const float*> xs{params.data()};
    std::uint64_t count = 1;
    for (std::size_t k = 0; k < neighbours_.size(); ++k)
      if (k != j && relay[k]) {
        xs.push_back(relayed_[k].sum.data());
        count += relayed_[k].count;
      }
    auto message = std::make_shared<std::vector<float>>(n);
    mix_weighted(*message, xs, std::vector<double>(xs.size(), 1.0));
    outgoing.push_back({params_payload(options_, std::move(message)), count});
  }
  RoundResult result;
  if (!neighbours_.empty())
    result = exchange_.run(std::move(outgoing), params, round, neighbours_, neighbours_).result;
  // x_i = (1/n) ((n − Σ_j c_j) x_i + Σ_j m_{j→i}), with what came this round (or stands in).
  ++rounds_;
  std::vector<const float*> xs{params.data()};
  std::vector<double> w{peers};
  heard_ = 1;
  for (std::size_t k = 0; k < neighbours_.size(); ++k) {
    Relayed& r = relayed_[k];
    const bool use = usable(k, round);
    if ((use ? r.count : 0) + 1 >= static_cast<std::uint64_t>(behind_[k])) r.whole_at = rounds_;
    check_side(k, round);
    if (!use) continue;
    xs.push_back(r.sum.data());
    w.push_back(1.0);
    w[0] -= static_cast<double>(r.count);
    heard_ += r.count;
  }
  for (double& v : w) v /= peers;
  mix_weighted(params, xs, w);
  last_.assign(params.begin(), params.end());
  current_ = {};
  return result;
}

}  // namespace hearsay::algorithms
