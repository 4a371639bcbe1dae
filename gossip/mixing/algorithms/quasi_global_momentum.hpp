// Quasi-global momentum (Lin, Karimireddy, Stich, Jaggi, ICML 2021): --momentum-kind
// quasi-global. The momentum runs over the model's whole change from one round to the
// next, mixing included, instead of over each peer's own gradients: on heterogeneous
// shards a peer's local momentum keeps pushing along its own data's direction, which
// mixing then has to undo every round; the change across rounds is closer to the
// network's.
//
// The paper, for one local step per round, with optimizer momentum off (g the gradient):
//
//   m = β m̂ + g;  x_half = x_t − η m;  x_{t+1} = Σ_j W(i, j) x_half_j
//   m̂ = β m̂ + (1 − β) (x_t − x_{t+1}) / η
//
// Here the optimizer (momentum 0) has taken x_t to x_t − η g before the round, so the
// round first adds − β v and after mixing updates v, with v = η m̂ holding updates (the
// learning rate in them), as PowerSGD's momentum does (powersgd.hpp):
//
//   x_half = x' − β v;  x_{t+1} = mix(x_half);  v = β v + (1 − β) (x_t − x_{t+1})
//
// (The paper's buffer takes β of its last value and 1 − β of the change, which already
// holds β of it: it moves at β (2 − β) a round, 0.99 at β 0.9, and a steady gradient's
// step comes to heavy-ball's lr g / (1 − β) over about a hundred rounds.)
// Deviations, stated: with --gossip-every H the optimizer's H steps are one g, and the
// momentum acts once per round; while the learning rate changes, v weighs each earlier
// round at its own rate; the first round only starts the record of x_t (v stays 0); a
// restarted peer starts again from v = 0 (v is not in the checkpoint). Only the first
// `values` numbers of the buffer get it: the parameters, not BatchNorm statistics mixed
// after them. The Mixer (mixer.hpp) runs it around every round, on the communication
// thread, for every algorithm; with --overlap x_t is the last round's result as the
// communication thread holds it, so v follows the same changes one round later.
//
// Not over a coarse consensus step (compress::coarse_consensus: CHOCO's copies under topk,
// randk or sign, PowerGossip's projections; momentum_kind_refusal refuses them). Such a
// step moves a model by an estimate of its neighbours' differences that leaves most of
// each round's change behind; the momentum carries that move on for about 1/(1 − β)
// rounds, so the estimate's error is fed back tenfold at β 0.9, where the consensus step
// was chosen small (or the projection coarse) so that it would not be.
// int4's copies follow their models to 1/16 of each change, and it trains as D-PSGD does.
#pragma once
#include <cstddef>
#include <span>
#include <vector>

namespace hearsay::algorithms {

class QuasiGlobalMomentum {
 public:
  // std::invalid_argument for β outside [0, 1).
  QuasiGlobalMomentum(double beta, std::size_t values);

  // Before a round: buffer -= β v over the first values numbers (nothing in the first round).
  void before_round(std::span<float> buffer);
  // After a round mixed the buffer: v = β v + (1 − β) (x_t − x_{t+1}); x_t = x_{t+1}.
  void after_round(std::span<const float> buffer);

  std::span<const float> velocity() const noexcept { return velocity_; }  // empty before a round

 private:
  double beta_;
  std::size_t values_;
  std::vector<float> velocity_;  // v
  std::vector<float> last_;      // x_t: the last round's result (empty before one)
};

}  // namespace hearsay::algorithms
