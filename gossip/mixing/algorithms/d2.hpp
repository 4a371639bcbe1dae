// D² (Tang, Lian, Yan, Zhang, Liu, ICML 2018): --algo d2. Decentralized training whose
// error does not grow with the variance between the peers' data: each round mixes the
// model extrapolated by its last change, corrected by the change of the gradient, so the
// pull of each peer's own data cancels from one round to the next.
//
// As the paper writes it (step γ, gradients at x_t and x_{t−1}):
//
//   x_{t+1} = Σ_j W(i, j) (2 x_j(t) − x_j(t−1) − γ ∇F_j(x_j(t)) + γ ∇F_j(x_j(t−1)))
//   x_1 = Σ_j W(i, j) (x_j(0) − γ ∇F_j(x_j(0)))
//
// Here the peer's optimizer has taken its step before the round, so the algorithm sees
// x_t + u_t (u_t its update at x_t) and sends
//
//   h_t = params + (x_t − x_{t−1}) − u_{t−1} = 2 x_t − x_{t−1} + u_t − u_{t−1};  x_{t+1} = Σ_j W̃(i, j) h_j
//
// one vector per round, as D-PSGD. D² needs a symmetric, doubly stochastic W with every
// eigenvalue above −1/3; a ring of uniform weights 1/3 on an even number of peers has one
// at −1/3 exactly. So it mixes with W̃ = (1 − c) W + c I, c the least that gives every
// peer's own weight at least kMinSelfWeight over the whole graph (Gershgorin then puts a
// symmetric W̃'s eigenvalues at or above 2 kMinSelfWeight − 1 = −0.2): the ring's c is
// 0.1, the 8-peer exponential graph's 0.28.
//
// A directed graph (exp) is mixed over its undirected version (Topology::undirected): each
// peer sends to its in-neighbours as well as its out-neighbours, and hears both. A W that
// is not symmetric has complex eigenvalues λ, and the recurrence's own modes, the roots of
// z² − 2λz + λ, then leave the unit circle: with the exponential graph's own lazy W the
// largest |z| is 0.966 on 8 peers, 1.029 on 16 and 1.065 on 64, where the peers' models
// drift apart by 6.5% a round whatever the learning rate (--lr 0 took their consensus
// distance from 28 to 239 in one epoch). The undirected exponential graph's is 0.884 on 64
// peers (the ring's 0.999). It costs messages: 11 a round on exp(64) instead of 6.
//
// Deviations, stated: u is the optimizer's update (its momentum in it), not − γ ∇F; the
// first round (and the first after a restart, which loses x_{t−1}) is D-PSGD's. A round
// that misses a neighbour mixes its last message of the two rounds before (LastHeard), or
// gives its weight to our own values (Missing::to_self).
//
// h_t − params is last round's mixing change, whose sum over the peers is 0 while W keeps
// the sum; a lost peer takes its part with it, and the rest then moves the survivors every
// round from then on (a kill on dirichlet:0.1 took 4 MLP peers from 0.83 to chance). So,
// as tracking.hpp, every kRestartRounds rounds every peer runs a first round again at once
// (h = params), which makes that sum 0 again.
#pragma once
#include <vector>

#include "gossip/mixing/algorithms/algorithm.hpp"
#include "gossip/mixing/algorithms/params_exchange.hpp"
#include "gossip/mixing/topology/topology.hpp"

namespace hearsay::algorithms {

class D2 final : public Algorithm {
 public:
  static constexpr double kMinSelfWeight = 0.4;
  static constexpr std::uint64_t kRestartRounds = 32;  // as Tracking's
  // std::invalid_argument when the graph's size differs from the peers'.
  D2(transport::Transport& transport, PeerSet peers, AlgorithmOptions options,
     const topology::Topology& graph);

  std::string_view name() const override { return "d2"; }
  RoundResult mix(std::span<float> params, std::uint64_t round) override;

 private:
  topology::Topology graph_;
  double laziness_ = 0;                    // c
  std::vector<topology::MixingRow> rows_;  // our row of W̃, by round % period
  ParamsExchange exchange_;
  LastHeard heard_;              // stands in for a lost message
  std::vector<float> last_;      // x_t (empty before the first round)
  std::vector<float> previous_;  // x_{t−1}
  std::vector<float> update_;    // u_{t−1}
  std::uint64_t last_round_ = 0;
};

}  // namespace hearsay::algorithms
