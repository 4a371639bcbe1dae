// D-PSGD (Lian et al. 2017): synchronous decentralized averaging on a graph with mixing
// weights. In round r every peer sends its parameters x_i to its out-neighbours of round
// r, waits until the round deadline (learnt from recent rounds: ParamsExchange::round_wait)
// for its in-neighbours' round-r parameters, and sets
// x_i <- sum_j W(i, j) x_j with W = MixingMatrix::weights(graph, options.weights, r).
//
// Everyone mixes the values as they were before the round (its own included), so on a
// doubly stochastic W the network average is unchanged; with a compressed payload
// (--compress) a peer adds sum_j W(i, j) (dec x_j - dec x_i), the neighbours' values as it
// decoded them less its own as they decoded them, which keeps the average too. A neighbour that misses the
// deadline (or broke) is left out of this round and the row is renormalised over self
// and those that arrived, so the result stays a convex combination; its late message is
// discarded when the next round starts. See docs/PROTOCOL.md for the messages.
#pragma once
#include <vector>

#include "gossip/mixing/algorithms/algorithm.hpp"
#include "gossip/mixing/algorithms/params_exchange.hpp"
#include "gossip/mixing/topology/topology.hpp"

namespace hearsay::algorithms {

class Dpsgd final : public Algorithm {
 public:
  // The graph's ranks are peers' indices; std::invalid_argument when the sizes differ.
  Dpsgd(transport::Transport& transport, PeerSet peers, AlgorithmOptions options,
        const topology::Topology& graph);

  std::string_view name() const override { return "dpsgd"; }
  // round: the Mixer's; the round actually run is later when this peer was behind its
  // neighbours (ParamsExchange::catch_up).
  RoundResult mix(std::span<float> params, std::uint64_t round) override;
  std::uint64_t rounds_skipped() const noexcept { return exchange_.rounds_skipped(); }

 private:
  topology::Topology graph_;
  std::vector<topology::MixingRow> rows_;  // our row of W, by round % period
  ParamsExchange exchange_;
};

}  // namespace hearsay::algorithms
