// Local SGD (periodic averaging, Stich 2019; Lin et al. 2020): peers train alone for H
// steps and then replace their parameters by the exact average over the run. Each mix()
// is one all-to-all exchange: every peer sends its parameters (params_push, step =
// round) to every other peer and averages what arrived by the round deadline with its
// own. A peer that misses the deadline (learnt: ParamsExchange::round_wait) or broke is
// left out of that round's average.
//
// The average is taken in rank order and in double, so peers that heard from the same
// peers end the round with bit-identical parameters. With a compressed payload a peer
// averages its own values as the others decode them, for the same reason.
//
// The graph only fixes who takes part (its size must match the peers): full averaging
// does not follow its edges. The exchange costs each peer (n - 1) sends of the full
// buffer per round, which is what local SGD trades for mixing only every H steps.
#pragma once
#include <vector>

#include "gossip/mixing/algorithms/algorithm.hpp"
#include "gossip/mixing/algorithms/params_exchange.hpp"
#include "gossip/mixing/topology/topology.hpp"

namespace hearsay::algorithms {

class LocalSgd final : public Algorithm {
 public:
  // std::invalid_argument when the graph's size differs from the number of peers.
  LocalSgd(transport::Transport& transport, PeerSet peers, AlgorithmOptions options,
           const topology::Topology& graph);

  std::string_view name() const override { return "local"; }
  RoundResult mix(std::span<float> params, std::uint64_t round) override;

 private:
  std::vector<int> others_;  // every rank but ours
  ParamsExchange exchange_;
};

}  // namespace hearsay::algorithms
