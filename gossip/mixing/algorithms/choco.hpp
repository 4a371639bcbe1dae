// D-PSGD with compressed communication: CHOCO-SGD (Koloskova, Stich, Jaggi, ICML 2019),
// what `--algo dpsgd --compress topk:1%` (randk:P%, sign, int4) runs.
//
// Each peer i keeps a public copy x̂_i of itself, which its out-neighbours keep copies of,
// and copies x̂_j of its in-neighbours'. In round r it sends q = Q(x_i − x̂_i), the change
// of its public copy compressed (gossip/mixing/compress), adds decode(q) to x̂_i, adds the
// in-neighbours' decoded changes to its copies of theirs, and moves towards them:
//
//   x_i <- x_i + γ Σ_j W(i, j) (x̂_j − x̂_i)        γ = --consensus-step
//
// With every copy equal on both ends of every link and W doubly stochastic, mixing keeps
// the network's sum, as uncompressed D-PSGD does; what the compressor leaves out of one
// round's change stays in x − x̂ and is sent later (error feedback by construction).
//
// The copies stay equal to the bit under loss, reordering and restarts (docs/PROTOCOL.md
// 4.8): every change carries the version of the copy it applies to (wire::Header::base);
// a receiver whose copy is not at that version leaves it as it is and asks the sender
// (copy_resync), whose next round sends that neighbour its public copy whole (this round's
// change applied, the copy itself unchanged) and the others the change as usual. A peer's first round
// (also after a restart) starts its copy as its model and sends it whole; one that finds
// its neighbours mid-run then rebases its copy on theirs (rebase_public: hearsay's, not the
// paper's, which has no restarts). Rounds, deadlines, lost-message detection and probes
// are ParamsExchange's, as for Dpsgd.
//
// The look-ahead (--lookahead, on by default; hearsay's, not the paper's). CHOCO's γ must be
// small for a sparsifier (topk:1% diverged at 0.2 on LeNet), so the iterate x_i stays far
// from its neighbours (a consensus distance hundreds of times D-PSGD's) and takes its
// gradients there. With the look-ahead the parameters the peer trains on are
//
//   z_i = x_i + κ Σ_j W(i, j) (x̂_j − x̂_i)        (κ of a gossip step over the copies)
//
// of which x_i + γ Σ_j W(i, j) (x̂_j − x̂_i) is the next iterate, as in the paper; the rest,
// (κ − γ) Σ_j W(i, j) (x̂_j − x̂_i), is taken off again before the next round (ahead_). So
// x follows CHOCO's recurrence with its gradients taken at z. The copies and the wire are
// unchanged, and with W doubly stochastic and the copies equal on both ends the look-ahead
// parts sum to zero over the peers: the network's average is x's.
// How far: the gradient feeds the look-ahead back into x. Along a disagreement of W's
// eigenvalue λ (μ = 1 − λ) and a curvature h, x's multiplier per round is
// 1 − γμ − η h (1 − κμ): while κ Re μ ≤ 1 the gradient still pulls the peers together, and
// beyond it pushes them apart along sharp directions. So κ = 1 / max Re μ over W's
// eigenvalues (topology::mixing_reach), at most 1: 0.85 on exp(8), ¾ on a ring, 1 on the
// complete graph, and never below ½ (Gershgorin's bound, for graphs that are not
// circulant). On LeNet/exp(8), κ = 1 (past the bound) tripled the consensus distance and
// 1.25 took it from 0.8 to 274; ½ (the bound for any W) ended 0.11 point lower than 0.85
// on the mean of ten seeds (docs/PERFORMANCE.md). Where γ ≥ κ there is nothing to add. --no-lookahead runs
// the paper's recurrence.
//
// A neighbour whose copy this peer holds but has not heard from in kHeardWithin rounds
// (dead, cut off) is left out of the consensus step: its copy would pull this peer
// towards a model nobody trains any more. Time-varying graphs (onepeer-exp) are refused:
// a copy is only kept by neighbours that receive every change of it.
#pragma once
#include <memory>
#include <vector>

#include "gossip/mixing/algorithms/algorithm.hpp"
#include "gossip/mixing/algorithms/params_exchange.hpp"
#include "gossip/mixing/compress/compressor.hpp"
#include "gossip/mixing/topology/topology.hpp"

namespace hearsay::algorithms {

// γ for a compressor when --consensus-step is not given (docs/PERFORMANCE.md has the
// sweeps they come from): for D-PSGD's rounds, or (pairwise) for gossip's exchanges over
// link copies (link_copies.hpp).
double default_consensus_step(std::string_view compressor, bool pairwise = false);

class Choco final : public Algorithm {
 public:
  // options.compressor names the compressor (compress::make_compressor);
  // std::invalid_argument for a graph of another size, a time-varying graph, a bad
  // compressor or a consensus step outside (0, 1].
  Choco(transport::Transport& transport, PeerSet peers, AlgorithmOptions options,
        const topology::Topology& graph);

  std::string_view name() const override { return "dpsgd"; }
  RoundResult mix(std::span<float> params, std::uint64_t round) override;

  static constexpr std::uint64_t kHeardWithin = 8;
  // κ of the look-ahead for a graph's mixing_reach (topology.hpp): 1 / reach, at most 1;
  // the parameters are x + max(γ, κ) Σ_j w_j (x̂_j − x̂_i).
  static double lookahead_for(double reach);
  struct Stats {
    std::uint64_t whole_sent = 0;      // rounds that sent the public copy whole (to anyone)
    std::uint64_t whole_messages = 0;  // messages that carried it whole
    std::uint64_t resyncs_asked = 0;  // copy_resync sent: a copy was stale
    std::uint64_t resyncs_heard = 0;  // copy_resync received
    std::uint64_t rebases = 0;        // public copies rebased on the neighbours' after a (re)join
  };
  Stats stats() const noexcept { return stats_; }
  // This peer's public copy and its copy of rank's (empty when it holds none), and their
  // versions: for tests that check both ends of a link agree.
  std::span<const float> public_copy() const noexcept { return public_; }
  std::span<const float> copy_of(int rank) const { return copies_.at(static_cast<std::size_t>(rank)).values; }
  std::uint64_t public_version() const noexcept { return public_version_; }
  std::uint64_t version_of(int rank) const { return copies_.at(static_cast<std::size_t>(rank)).version; }
  // What the parameters carry beyond the CHOCO iterate x (empty: nothing).
  std::span<const float> ahead() const noexcept { return ahead_; }
  double consensus_step() const noexcept { return gamma_; }
  double lookahead() const noexcept { return lookahead_; }  // κ, whether or not --lookahead is on

 private:
  struct Copy {
    std::vector<float> values;
    std::uint64_t version = 0;  // 0: none held
    std::uint64_t heard = 0;    // the last round + 1 a message of it was taken in
    std::uint64_t asked = 0;    // the round + 1 a copy_resync was last sent in
  };
  // The round's messages to `out`: the public copy's compressed change (applied to it),
  // or the copy whole to those that asked for it (to all in the first round); one message
  // when all get the same.
  std::vector<ParamsExchange::Outgoing> next_messages(std::span<const float> params, std::uint64_t round,
                                                      std::span<const int> out);
  ParamsExchange::Taken take(const transport::Message& message, int rank);
  void ask_resync(int rank, Copy& copy);
  // With rebase_: the public copy becomes the weighted average of the in-neighbours' copies,
  // once all are held (true: send it whole this round); gives up after kHeardWithin rounds.
  bool rebase_public(std::uint64_t round);
  // x += γ Σ_j w_j (x̂_j − x̂_self) over the in-neighbours heard from lately; with the
  // look-ahead the parameters become x + ½ Σ_j w_j (x̂_j − x̂_self) and ahead_ the difference.
  void consensus(std::span<float> params, std::uint64_t round);

  topology::Topology graph_;
  std::vector<topology::MixingRow> rows_;  // our row of W (the graph is static: one)
  ParamsExchange exchange_;
  std::unique_ptr<compress::Compressor> compressor_;
  double gamma_;
  double lookahead_;           // κ
  std::vector<float> public_;  // x̂_self
  std::uint64_t public_version_ = 0;
  std::vector<char> resync_for_;  // by rank: the next round sends it the public copy whole
  std::vector<Copy> copies_;  // by rank
  std::uint64_t round_ = 0;   // the round being run (take() is called within it)
  std::vector<float> scratch_;
  // What the parameters carry beyond the CHOCO iterate: (½ − γ) Σ_j w_j (x̂_j − x̂_self) of
  // the last round; empty when they carry nothing (no look-ahead, no copy heard yet).
  std::vector<float> ahead_;
  // Set when this peer took its copy whole from its model but its neighbours are mid-run
  // (a change past round kHeardWithin came for a copy it never held: it restarted or joined
  // late); cleared once it rebased its public copy on theirs (next_messages).
  bool rebase_ = false;
  std::uint64_t rebase_since_ = 0;  // the round + 1 rebase_ was set in
  Stats stats_;
};

}  // namespace hearsay::algorithms
