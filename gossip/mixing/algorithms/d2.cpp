#include "gossip/mixing/algorithms/d2.hpp"

#include <algorithm>
#include <memory>

namespace hearsay::algorithms {

namespace {

// The least c for which every row of (1 − c) W + c I gives self at least `floor`.
double laziness_for(const topology::Topology& graph, topology::WeightScheme weights, double floor) {
  double least_self = 1;
  for (int r = 0; r < graph.peers(); ++r)
    for (std::uint64_t p = 0; p < graph.period(); ++p)
      least_self = std::min(least_self, topology::mixing_row(graph, weights, r, p).self);
  return least_self >= floor ? 0.0 : (floor - least_self) / (1 - least_self);
}

}  // namespace

D2::D2(transport::Transport& transport, PeerSet peers, AlgorithmOptions options,
       const topology::Topology& graph)
    : Algorithm(transport, std::move(peers), options),
      graph_(graph.undirected()),
      exchange_(transport_, peers_, options_, log_) {
  check_graph_matches("d2", graph_, peers_.size());
  laziness_ = laziness_for(graph_, options_.weights, kMinSelfWeight);
  rows_ = topology::mixing_rows(graph_, options_.weights, peers_.self);
  for (topology::MixingRow& row : rows_) {
    row.self = (1 - laziness_) * row.self + laziness_;
    for (double& w : row.neighbours) w *= 1 - laziness_;
  }
}

RoundResult D2::mix(std::span<float> params, std::uint64_t mixer_round) {
  const std::uint64_t round = exchange_.catch_up(mixer_round);
  const int self = peers_.self;
  const std::size_t n = params.size();
  if (last_.size() != n) last_.assign(params.begin(), params.end());  // the first round: x_0
  if (previous_.size() != n || round / kRestartRounds != last_round_ / kRestartRounds) {
    previous_ = last_;  // h = params: x_{t−1} = x_t, u_{t−1} = 0
    update_.assign(n, 0.0f);
  }
  // h_t = params + (x_t − x_{t−1}) − u_{t−1}; u_t = params − x_t.
  auto own = std::make_shared<std::vector<float>>(n);
  for (std::size_t i = 0; i < n; ++i) {
    const float u = params[i] - last_[i];
    (*own)[i] = params[i] + (last_[i] - previous_[i]) - update_[i];
    update_[i] = u;
  }
  const auto& in = graph_.in_neighbours(self, round);
  const auto outcome = exchange_.run(own, round, graph_.out_neighbours(self, round), in);
  const topology::MixingRow& row = rows_[round % rows_.size()];
  MixTerms terms = mix_terms(exchange_, outcome, row, in, own->data(), round, "d2", Missing::to_self);
  heard_.stand_in(terms, outcome, row, in, round);
  heard_.keep(exchange_, outcome, round);
  if (options_.compress != wire::Dtype::f32) mix_own_as_decoded(terms, exchange_);
  auto& [xs, w] = terms;
  mix_weighted(params, xs, w);
  previous_.swap(last_);
  last_.assign(params.begin(), params.end());
  last_round_ = round;
  return outcome.result;
}

}  // namespace hearsay::algorithms
