#include "gossip/mixing/algorithms/tracking.hpp"

#include <algorithm>
#include <memory>

namespace hearsay::algorithms {

Tracking::Tracking(transport::Transport& transport, PeerSet peers, AlgorithmOptions options,
                   const topology::Topology& graph)
    : Algorithm(transport, std::move(peers), options),
      graph_(graph),
      exchange_(transport_, peers_, options_, log_) {
  check_graph_matches("tracking", graph_, peers_.size());
  rows_ = topology::mixing_rows(graph_, options_.weights, peers_.self);
}

RoundResult Tracking::mix(std::span<float> params, std::uint64_t mixer_round) {
  const std::uint64_t round = exchange_.catch_up(mixer_round);
  const int self = peers_.self;
  const std::size_t n = params.size();
  if (last_.size() != n) {  // the first round: x_0 is what we have, the tracker starts at 0
    last_.assign(params.begin(), params.end());
    update_.assign(n, 0.0f);
    mixed_.assign(n, 0.0f);
    tracker_.assign(n, 0.0f);
  } else if (round / kRestartRounds != last_round_ / kRestartRounds) {  // z_t = u_t (a skip included)
    std::fill(update_.begin(), update_.end(), 0.0f);
    std::fill(mixed_.begin(), mixed_.end(), 0.0f);
  }
  // (x_t, z_t), z_t = (W z)_{t−1} + u_t − u_{t−1} with u_t = params − x_t.
  auto own = std::make_shared<std::vector<float>>(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    const float u = params[i] - last_[i];
    tracker_[i] = mixed_[i] + u - update_[i];
    update_[i] = u;
    (*own)[i] = last_[i];
    (*own)[n + i] = tracker_[i];
  }
  const auto& in = graph_.in_neighbours(self, round);
  const auto outcome = exchange_.run(own, round, graph_.out_neighbours(self, round), in);
  const topology::MixingRow& row = rows_[round % rows_.size()];
  MixTerms terms = mix_terms(exchange_, outcome, row, in, own->data(), round, "tracking", Missing::to_self);
  heard_.stand_in(terms, outcome, row, in, round);
  heard_.keep(exchange_, outcome, round);
  if (options_.compress != wire::Dtype::f32) mix_own_as_decoded(terms, exchange_);
  auto& [xs, w] = terms;
  // x_{t+1} = Σ_j W(i, j) x_j + z_t, and (W z)_t from the second halves.
  mix_weighted(params, xs, w);
  for (std::size_t i = 0; i < n; ++i) params[i] += tracker_[i];
  std::vector<const float*> zs;
  for (const float* x : xs) zs.push_back(x + n);
  mix_weighted(mixed_, zs, w);
  last_.assign(params.begin(), params.end());
  last_round_ = round;
  return outcome.result;
}

}  // namespace hearsay::algorithms
