// D-PSGD with low-rank compressed differences: PowerGossip (Vogels, Karimireddy, Jaggi,
// NeurIPS 2020), what `--algo dpsgd --compress powergossip:R` runs.
//
// Each edge {i, j} of an undirected graph has a basis that both ends hold, equal to the
// bit, and each round each end sends the other its model projected on it. Per tensor X
// (rows x cols, as compress/low_rank.hpp reshapes it) the basis is q (cols x R, orthonormal
// columns) in one round and p (rows x R) in the next, and the message X q, then X^T p.
// With lo the lower rank of the two and M = X_lo − X_hi, both ends then hold M q =
// X_lo q − X_hi q exactly, and move towards each other along it:
//
//   X_lo <- X_lo − γ w M q q^T        X_hi <- X_hi + γ w M q q^T      γ = --consensus-step
//
// D-PSGD's step on the part of the difference that lies in the basis: exact, so there
// is no error to feed back and no copy to keep (CHOCO keeps one per neighbour). The next
// basis is what came out, orthonormalised (p = orth(M q), then q = orth(M^T p)): one step
// of power iteration a round, warm-started, so each edge's basis turns towards the
// directions in which its two models differ most. Two choices are hearsay's: γ defaults
// to 1 (the step is a projection, which cannot overshoot), and the
// weight w of an edge is the mean of what each end's row gives the other (equal under
// Metropolis weights), so both ends move by the same amount and the network's sum stays.
// Tensors the plan sends whole (vectors, small matrices) are D-PSGD's on their own.
//
// Keeping the bases equal (docs/PROTOCOL.md 4.9): a message carries the id of the basis it
// was projected on (wire::Header::base): 2(t + 1) for one derived in round t, 2t + 1 for
// one drawn in round t from a seed both ends know (the edge and the round). A basis is
// drawn at the start, after a restart, when a derived one has a zero column (the models
// agree along it), and the round after an end heard an id not its own: it then does not
// move on that edge. So when one message of an edge is lost, the end that heard moves and
// derives, the other does neither; the next round each hears the other's id, and both
// draw the round after: the edge loses two rounds, and one end's move, which shifts the
// network's mean as a neighbour D-PSGD leaves out of a round does. Rounds, deadlines,
// lost-message detection and probes are ParamsExchange's, with a message of its own per
// neighbour. Directed and time-varying graphs are refused: an edge needs both directions
// every round.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gossip/mixing/algorithms/algorithm.hpp"
#include "gossip/mixing/algorithms/params_exchange.hpp"
#include "gossip/mixing/compress/low_rank.hpp"
#include "gossip/mixing/topology/topology.hpp"

namespace hearsay::algorithms {

// Why PowerGossip cannot run over `graph`: a directed one (exp and onepeer-exp by nature,
// which the latter also changes by round; ring, torus or a file when they say so), saying
// what to use; nullopt when it can. The peer's and the simulator's flags ask it before
// anything starts, the constructor again on the graph as resolved (a graph file's
// direction is known once it is read).
std::optional<std::string> power_gossip_graph_refusal(const topology::GraphSpec& graph);

class PowerGossip final : public Algorithm {
 public:
  // options.compressor is "powergossip:R"; options.tensors the model's (empty: 64 x 64
  // pieces, compress::plan_low_rank). std::invalid_argument for a graph of another size, a
  // directed or time-varying graph, another compressor or a consensus step outside (0, 1].
  PowerGossip(transport::Transport& transport, PeerSet peers, AlgorithmOptions options,
              const topology::Topology& graph);

  std::string_view name() const override { return "dpsgd"; }
  RoundResult mix(std::span<float> params, std::uint64_t round) override;

  struct Stats {
    std::uint64_t moved = 0;       // edge rounds that moved along the basis
    std::uint64_t mismatched = 0;  // edge rounds whose two ends had different bases
    std::uint64_t drawn = 0;       // bases drawn from the seed
  };
  Stats stats() const noexcept { return stats_; }
  // The basis of the edge to rank and its id (0: none yet): for tests that check both
  // ends agree.
  std::span<const float> basis_of(int rank) const { return edges_.at(static_cast<std::size_t>(rank)).basis; }
  std::uint64_t basis_id(int rank) const { return edges_.at(static_cast<std::size_t>(rank)).id; }
  // The floats of one message: the larger of the two kinds (0 before the first round).
  std::uint64_t floats_per_message() const noexcept;

 private:
  struct Edge {
    std::uint64_t id = 0;  // of the basis; 0: draw one at the next round
    bool on_rows = false;  // the basis is p (rows x R a tensor), the message X^T p
    std::vector<float> basis;
    std::vector<float> sent;  // this round's projection of our model
    std::vector<float> heard;
    std::uint64_t heard_id = 0;
    bool arrived = false;
  };
  void draw(Edge& edge, int rank, std::uint64_t round);
  // Our model on the edge's basis, into edge.sent.
  void project(Edge& edge, std::span<const float> params) const;
  ParamsExchange::Taken take(const transport::Message& message, int rank);
  // The round's move on one edge, and its next basis.
  void move(Edge& edge, int rank, std::span<float> params, std::uint64_t round);

  topology::Topology graph_;
  ParamsExchange exchange_;
  int rank_;  // R
  double gamma_;
  std::vector<double> weights_;  // by rank: the edge's w (0: no edge)
  std::optional<compress::LowRankPlan> plan_;
  std::uint64_t whole_ = 0;  // floats of the tensors sent whole (the last of every message)
  std::vector<Edge> edges_;  // by rank
  std::vector<float> diff_;
  Stats stats_;
};

}  // namespace hearsay::algorithms
