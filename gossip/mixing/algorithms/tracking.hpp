// Gradient tracking (DIGing; Nedić, Olshevsky, Shi 2017; for deep learning Pu & Nedić 2020,
// Koloskova et al. 2021): --algo tracking. Each peer mixes, besides its parameters, a
// tracker of the network's average update, and steps along the tracker instead of its own
// gradient. On heterogeneous shards D-PSGD's peers each pull toward their own data's
// optimum and mixing pulls them back every round; the tracker removes that pull.
//
// As the paper writes it (step η, gradients g at x_t):
//
//   x_{t+1} = Σ_j W(i, j) x_j(t) − η y_i(t)
//   y_{t+1} = Σ_j W(i, j) y_j(t) + g_i(t + 1) − g_i(t),      y(0) = g(0)
//
// Here the peer's optimizer has taken its step before the round, so the algorithm sees
// x_t + u_t, u_t the optimizer's update at x_t (− η g without momentum), and tracks updates
// instead of gradients, z = − η y:
//
//   u_t = params − x_t;  z_t = (W z)_{t−1} + u_t − u_{t−1}
//   send (x_t, z_t);  x_{t+1} = Σ_j W(i, j) x_j + z_t;  (W z)_t = Σ_j W(i, j) z_j
//
// One exchange per round carries both vectors (2n values: docs/PROTOCOL.md §4.10). On a
// doubly stochastic W the network's average moves by the average update every round, as
// all-reduce's does, whatever each peer's data. Deviations, stated: the tracker follows
// the optimizer's update (its momentum and learning rate in it), not the raw gradient;
// the first round (and the first after a restart, which loses x_t and the tracker) mixes
// as D-PSGD does and starts the tracker at 0; a round that misses a neighbour mixes its
// message of the two rounds before (LastHeard), or else gives its weight to our own values
// (Missing::to_self: a renormalised row, no longer column-stochastic, fed a lost peer's
// pull back every round; docs/PERFORMANCE.md). The exchange log's
// distance is over both vectors. Values compressed on the wire (--compress f16, bf16,
// int8) are mixed as D-PSGD mixes them: ours decoded as our neighbours decode them.
//
// A lost peer takes its share of the trackers with it: the survivors' trackers then sum to
// their updates less the lost peer's correction (z − u), and that difference, its data's
// pull, moves every survivor every round from then on (a kill on dirichlet:0.1 took 4 MLP
// peers from 0.80 to 0.23). A restarted peer, or a round that left a neighbour out, does
// the same on a smaller scale. So every kRestartRounds rounds every peer restarts its
// tracker at once (z_t = u_t; rounds are numbered alike on every peer), which makes the
// trackers' sum the updates' again: an error lasts at most that many rounds.
#pragma once
#include <vector>

#include "gossip/mixing/algorithms/algorithm.hpp"
#include "gossip/mixing/algorithms/params_exchange.hpp"
#include "gossip/mixing/topology/topology.hpp"

namespace hearsay::algorithms {

class Tracking final : public Algorithm {
 public:
  // Short enough that a lost peer's pull lasts a small part of an epoch (64 let a kill take 4
  // MLP peers on dirichlet:0.1 to 0.29; 32 kept them near D-PSGD), long enough for the
  // correction to build between restarts (on a ring of 8, to 4% of D-PSGD's bias on
  // quadratics: tests/test_tracking_d2.cpp).
  static constexpr std::uint64_t kRestartRounds = 32;
  // std::invalid_argument when the graph's size differs from the peers'.
  Tracking(transport::Transport& transport, PeerSet peers, AlgorithmOptions options,
           const topology::Topology& graph);

  std::string_view name() const override { return "tracking"; }
  RoundResult mix(std::span<float> params, std::uint64_t round) override;

 private:
  topology::Topology graph_;
  std::vector<topology::MixingRow> rows_;  // our row of W, by round % period
  ParamsExchange exchange_;
  LastHeard heard_;             // stands in for a lost message
  std::vector<float> last_;     // x_t: the last round's result (empty before the first)
  std::vector<float> update_;   // u_{t−1}
  std::vector<float> mixed_;    // (W z)_{t−1}
  std::vector<float> tracker_;  // z_t as sent
  std::uint64_t last_round_ = 0;
};

}  // namespace hearsay::algorithms
