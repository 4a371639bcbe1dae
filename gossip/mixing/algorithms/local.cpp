#include "gossip/mixing/algorithms/local.hpp"

#include <algorithm>
#include <memory>

namespace hearsay::algorithms {

LocalSgd::LocalSgd(transport::Transport& transport, PeerSet peers, AlgorithmOptions options,
                   const topology::Topology& graph)
    : Algorithm(transport, std::move(peers), options), exchange_(transport_, peers_, options_, log_) {
  check_graph_matches("local", graph, peers_.size());
  for (int r = 0; r < peers_.size(); ++r)
    if (r != peers_.self) others_.push_back(r);
}

RoundResult LocalSgd::mix(std::span<float> params, std::uint64_t mixer_round) {
  const std::uint64_t round = exchange_.catch_up(mixer_round);
  auto own = std::make_shared<const std::vector<float>>(params.begin(), params.end());
  const auto outcome = exchange_.run(own, round, others_, others_);

  // Our own term as the others see it: through the codec when the payload is compressed.
  const float* own_term =
      options_.compress == wire::Dtype::f32 ? own->data() : exchange_.sent_as_received().data();
  // The average in rank order. Back from rounds alone, we take the others' average over
  // ours; a peer back from rounds apart is averaged in from the next round
  // (ParamsExchange::kApartAfter).
  std::vector<const float*> xs;
  xs.reserve(outcome.arrived.size() + 1);
  bool self_added = !outcome.mixes_own();
  for (int rank : outcome.arrived) {
    if (!self_added && rank > peers_.self) {
      xs.push_back(own_term);
      self_added = true;
    }
    if (outcome.mixes(rank)) xs.push_back(exchange_.received(rank).data());
  }
  if (!self_added) xs.push_back(own_term);
  const std::vector<double> w(xs.size(), 1.0 / static_cast<double>(xs.size()));
  mix_weighted(params, xs, w);
  return outcome.result;
}

}  // namespace hearsay::algorithms
