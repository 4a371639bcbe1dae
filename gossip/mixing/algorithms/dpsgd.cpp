#include "gossip/mixing/algorithms/dpsgd.hpp"

#include <memory>
#include <stdexcept>

namespace hearsay::algorithms {

Dpsgd::Dpsgd(transport::Transport& transport, PeerSet peers, AlgorithmOptions options,
             const topology::Topology& graph)
    : Algorithm(transport, std::move(peers), options),
      graph_(graph),
      exchange_(transport_, peers_, options_, log_) {
  check_graph_matches("dpsgd", graph_, peers_.size());
  rows_ = topology::mixing_rows(graph_, options_.weights, peers_.self);
}

RoundResult Dpsgd::mix(std::span<float> params, std::uint64_t mixer_round) {
  const std::uint64_t round = exchange_.catch_up(mixer_round);
  const int self = peers_.self;
  const auto& in = graph_.in_neighbours(self, round);
  // Our pre-mix values: sent to the out-neighbours and mixed in as our own term.
  auto own = std::make_shared<const std::vector<float>>(params.begin(), params.end());
  const auto outcome = exchange_.run(own, round, graph_.out_neighbours(self, round), in);

  MixTerms terms =
      mix_terms(exchange_, outcome, rows_[round % rows_.size()], in, own->data(), round, "dpsgd");
  // Compressed: x_i + sum_j w_j (dec x_j - dec x_i) (w_self x_i + sum_j w_j dec x_j drifted
  // the sum by the codec's error times (1 - w_self) at every peer, every round).
  if (options_.compress != wire::Dtype::f32) mix_own_as_decoded(terms, exchange_);
  mix_weighted(params, terms.xs, terms.w);
  return outcome.result;
}

}  // namespace hearsay::algorithms
