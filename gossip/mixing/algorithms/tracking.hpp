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
// as D-PSGD does and starts the tracker at 0; a round that misses a neighbour renormalises
// its row as D-PSGD does (mix_terms), which leaves the trackers' sum short of the updates'
// by what the missing term carried, until the next rounds mix it away. The exchange log's
// distance is over both vectors. Values compressed on the wire (--compress f16, bf16,
// int8) are mixed as D-PSGD mixes them: ours decoded as our neighbours decode them.
#pragma once
#include <vector>

#include "gossip/mixing/algorithms/algorithm.hpp"
#include "gossip/mixing/algorithms/params_exchange.hpp"
#include "gossip/mixing/topology/topology.hpp"

namespace hearsay::algorithms {

class Tracking final : public Algorithm {
 public:
  // std::invalid_argument when the graph's size differs from the peers'.
  Tracking(transport::Transport& transport, PeerSet peers, AlgorithmOptions options,
           const topology::Topology& graph);

  std::string_view name() const override { return "tracking"; }
  RoundResult mix(std::span<float> params, std::uint64_t round) override;

  std::span<const float> tracker() const noexcept { return tracker_; }  // z_t of the last round

 private:
  topology::Topology graph_;
  std::vector<topology::MixingRow> rows_;  // our row of W, by round % period
  ParamsExchange exchange_;
  std::vector<float> last_;     // x_t: the last round's result (empty before the first)
  std::vector<float> update_;   // u_{t−1}
  std::vector<float> mixed_;    // (W z)_{t−1}
  std::vector<float> tracker_;  // z_t as sent
};

}  // namespace hearsay::algorithms
