// RelaySGD (Vogels, He, Kong, Koloskova, Jaggi, Stich: "RelaySum for Decentralized Deep
// Learning on Heterogeneous Data", NeurIPS 2021): --algo relaysgd. The peers talk only along
// a spanning tree of --graph (spanning_tree.hpp), and each passes on what it heard, so that
// every model reaches every peer, once, a hop a round. Every peer then holds an average of
// all the peers' models, each weighted 1/n, whatever their data: the pull of each peer's
// own shard, which D-PSGD's neighbourhood averages leave in the models, is gone.
//
// As the paper writes it (RelaySum/Model, its Algorithm 1), with x_i^{t+½} the model after
// the local step and N_i i's tree neighbours:
//
//   m_{i→j}^t = x_i^{t+½} + Σ_{k ∈ N_i \ j} m_{k→i}^{t−1}        (the relayed sum)
//   c_{i→j}^t = 1 + Σ_{k ∈ N_i \ j} c_{k→i}^{t−1}                 (how many models it holds)
//   x_i^{t+1} = (1/n) ( x_i^{t+½} + Σ_{j ∈ N_i} m_{j→i}^t + (n − 1 − Σ_j c_{j→i}^t) x^0 )
//
// so that x_i^{t+1} = (1/n) Σ_k x_k^{t−d(i,k)+½}, d the hops between peers on the tree.
//
// Averaging models of different ages loses part of every step: once every model is heard, a
// step taken by every peer ends in the peers' common model at 1/κ of its size, with
//
//   κ = 1/n + (1/n²) Σ_{i,k} d(i, k)          (2.75 on a ring of 8's chain, 1.91 on exp(8)'s tree)
//
// (found by delivering a unit step through the recurrence, as the paper's reference code
// does to correct its learning rate, and exact on every tree tried: tests/test_relaysgd.cpp).
// The paper tunes its learning rate with that correction in it (×3 to ×5); hearsay applies
// it itself, so that --lr means what it means for all-reduce: the model a peer relays is
// x_t + κ u_t, u_t = x_{t+½} − x_t its optimizer's update since its last result, in a round
// whose last round heard every model (or all but one: a lost leaf). When more are missing
// (the first rounds, until the tree's diameter; a cut tree; a partition) they are filled
// with the peer's own, which keeps far more of a step, and the step is taken as it is: κ
// there would scale it up to κ times over, which a partition does not survive
// (docs/PERFORMANCE.md). So RelaySGD reads its update off its own last result, and
// --overlap is refused.
//
// One message per tree edge and direction per round (n values, the count in the header's
// `base`: docs/PROTOCOL.md §4.11). Deviations, stated:
// - The models a peer has not heard yet (the first rounds: a model takes d(i,k) rounds to
//   come) or lost are filled with its own x_i^{t+½}, not with x^0: a peer that restarted,
//   or whose neighbour stopped, mixes around the gap rather than pulling back to the
//   initialisation (the paper's reference code does the latter by default).
// - A neighbour's message lost on the way is stood in for by its last one, if that came
//   within kRecentRounds and the transport has not said the neighbour is gone: a relayed
//   sum holds the same peers every round (the tree does not change), only older models of
//   them, so nothing is counted twice, and the fixed point stays the mean.
// - A lost peer: what each neighbour relays says how many models it holds, and in steady
//   state that is every peer on its side of the tree. A peer missing more than one model
//   from one side for kGoneRounds of its rounds in a row (after the first rounds, in which
//   the models are still on their way; longer while the neighbour has never been heard, as
//   after a restart) has lost that side: the tree is cut, and a cut tree cannot average
//   across the cut. The round throws: transport::PeerError naming the
//   neighbour when nothing comes from it at all (with the transport's word on it), else a
//   std::runtime_error saying how many models stopped coming from beyond it. Every peer
//   finds the cut this way, within kGoneRounds rounds of it, and the run fails as
//   all-reduce's does. One model missing is a lost leaf (a peer with nobody behind it),
//   which takes only its own model with it: the others mix on around it. A neighbour that
//   said bye (it ended its run; a restarted peer that resumed behind the others outlives
//   its neighbours) is not a cut either. The tree is not rebuilt around the gap.
// - Counts arriving are checked against the tree: a neighbour cannot relay more models than
//   there are peers on its side of the edge.
// Values compressed on the wire (--compress f16, bf16, int8) are the relayed sums, rounded
// once per hop.
//
// Momentum: each peer's optimizer keeps its own, as in the paper. Averaging older models
// takes back part of each step that the momentum goes on pushing; where most models are a
// round or two old (a shallow tree of many peers: exp on 64) heavy-ball momentum 0.9 then
// makes the loss rise at the peak of the warm-up, and --nesterov, which takes each round's
// gradient at once, trains far better there; on a chain, whose models' ages spread evenly,
// it makes little difference (bench/mixing_modes.py; docs/PERFORMANCE.md).
#pragma once
#include <cstdint>
#include <vector>

#include "gossip/mixing/algorithms/algorithm.hpp"
#include "gossip/mixing/algorithms/params_exchange.hpp"
#include "gossip/mixing/topology/spanning_tree.hpp"
#include "gossip/mixing/topology/topology.hpp"

namespace hearsay::algorithms {

class RelaySgd final : public Algorithm {
 public:
  // Rounds a sum may stand in for lost ones: enough that a lossy link almost never leaves a
  // sum missing, since the peers' own models would fill the gap and move the fixed point
  // off the mean (tests/test_relaysgd.cpp: 20% loss on every link).
  static constexpr std::uint64_t kRecentRounds = 8;
  // Rounds in a row a side of the tree may lack more than one model: more than a lossy link
  // ever costs (the exchange asks for a lost message again, and a sum stands in for
  // kRecentRounds), few enough that a cut tree fails within a second of rounds. A round
  // waits for an awaited neighbour up to the round timeout, so a slow neighbour is given as
  // many of those.
  static constexpr std::uint64_t kGoneRounds = 16;
  // A neighbour never heard from yet is given this many more: a peer that starts (or
  // restarts) before its neighbours can be reached tries again only PeerHealth::kRetryRounds
  // after a failed send.
  static constexpr std::uint64_t kFirstRounds = 2 * PeerHealth::kRetryRounds;
  // std::invalid_argument when the graph's size differs from the peers'.
  RelaySgd(transport::Transport& transport, PeerSet peers, AlgorithmOptions options,
           const topology::Topology& graph);

  std::string_view name() const override { return "relaysgd"; }
  RoundResult mix(std::span<float> params, std::uint64_t round) override;
  // The tree's neighbours of this peer, sorted, and how many peers lie behind each.
  const std::vector<int>& tree_neighbours() const noexcept { return neighbours_; }
  const std::vector<int>& behind() const noexcept { return behind_; }
  // The step correction κ above.
  double correction() const noexcept { return correction_; }

 private:
  // What one tree neighbour relayed last.
  struct Relayed {
    bool heard = false;
    std::uint64_t round = 0;  // the round it came in
    std::uint64_t count = 0;  // the models in it
    std::vector<float> sum;
    std::uint64_t whole_at = 0;  // our last round (rounds_ count) it lacked at most one model
  };
  ParamsExchange::Taken take(const transport::Message& message, int rank);
  // Whether neighbour k's last sum stands for round `round`.
  bool usable(std::size_t k, std::uint64_t round) const;
  // Throws when the side of neighbour k has lacked models for kGoneRounds rounds (see above).
  void check_side(std::size_t k, std::uint64_t round) const;

  std::vector<int> neighbours_;  // tree neighbours, sorted
  std::vector<int> behind_;      // peers on each neighbour's side of the edge, itself included
  int diameter_ = 0;             // the tree's
  double correction_ = 1;        // κ
  std::uint64_t heard_ = 0;      // models in the last round's mix, ours included
  std::vector<float> last_;      // x_t: the last round's result (empty before the first)
  ParamsExchange exchange_;
  std::vector<Relayed> relayed_;    // by index in neighbours_
  std::span<const float> current_;  // our values during a round, for the distance
  std::uint64_t rounds_ = 0;        // rounds this peer ran (a skip of catch_up is one)
};

}  // namespace hearsay::algorithms
