// Asynchronous decentralized parallel SGD ("adpsgd"; Lian et al. 2018): peers average
// in pairs, at their own pace, by the pairwise exchange of pairwise.hpp with alpha = 1/2.
//
// Peers are split into active and passive so that no two exchanges wait on each other:
// only active peers start exchanges, and only with passive ones. With a graph whose
// edges (over all rounds of its period, either direction) form a bipartite graph, its
// 2-colouring is used, colour 0 (the side of the lowest rank) active; otherwise even ranks
// are active and odd ranks passive. An active peer chooses among its passive graph
// neighbours, or among all passive peers when it has none (or when no graph is given).
//
// mix() on an active peer: one exchange with one live passive partner drawn at random
// (slow ones less often: PartnerTiming::choose), waiting for its reply while answering requests, for at most
// PairwiseExchange::reply_wait (its reply is applied later when it comes late; no new
// exchange starts before it settles). On a passive peer: answers the requests that
// arrived; when it answered none since its last round, it waits for one, until it has
// served one or that wait is over, whichever comes first, so that a passive peer's
// rounds keep pace with its partners' requests and never stall longer than the bound
// of within_compute (learnt_timeout.hpp). Both answer requests in serve(), between their
// rounds, as AD-PSGD's workers answer while they compute.
//
// A passive peer that served no request for more than kStarvedAfter rounds in a row
// reaches out itself: one exchange, as an active peer's, with a live graph neighbour of
// either side (any live peer when none is). Its active neighbours may all be dead or
// frozen, cut off by a partition, or have left it out of their choices after it was killed
// and came back (PartnerTiming: a peer that broke is left out for ten expiry horizons,
// longer than a short run, and a passive peer sends nothing that would bring it back);
// without this it trained alone to the end (soak: consensus distance 2 to 17, 3 to 15
// points under the healthy run). The exchange protocol keeps any two exchanges from
// overlapping (pairwise.hpp), so a passive peer starting one is safe; the split only keeps
// healthy runs from contending.
//
// An active peer whose passive partners are all left out (dead, or across a partition that
// splits the active peers from the passive ones: soak seed 20, consensus distance 44) asks
// a live graph neighbour of either side, or any live peer, in the same way.
//
// Partners are left out and retried as in gossip (see gossip.hpp). options.fanout,
// gossip_every (the caller's), overlap and weights do not apply.
#pragma once
#include <span>
#include <string_view>
#include <vector>

#include "base/rng.hpp"
#include "gossip/mixing/algorithms/algorithm.hpp"
#include "gossip/mixing/algorithms/pairwise.hpp"
#include "gossip/mixing/topology/topology.hpp"

namespace hearsay::algorithms {

// Who is active, and why.
struct ActivePassiveSplit {
  std::vector<bool> active;  // by rank
  bool from_graph = false;   // the graph's 2-colouring (false: even/odd ranks)
};
// The split for `peers` ranks; graph may be null. std::invalid_argument when the graph's
// size differs from peers.
ActivePassiveSplit split_active_passive(int peers, const topology::Topology* graph);

class AdPsgd final : public Algorithm {
 public:
  // Without a graph: even ranks active, each choosing among all odd ranks.
  AdPsgd(transport::Transport& transport, PeerSet peers, AlgorithmOptions options);
  // With a graph over the same ranks (std::invalid_argument when its size differs).
  AdPsgd(transport::Transport& transport, PeerSet peers, AlgorithmOptions options,
         const topology::Topology& graph);

  std::string_view name() const override { return "adpsgd"; }
  RoundResult mix(std::span<float> params, std::uint64_t round) override;
  void serve(std::span<float> params, Clock::time_point deadline) override;
  // Partners' requests are answered between our own rounds too.
  bool serves_between_rounds() const noexcept override { return true; }

  bool active() const noexcept { return active_; }
  // The passive ranks an active peer chooses among (empty on a passive peer).
  const std::vector<int>& candidates() const noexcept { return candidates_; }
  // Whether the split came from the graph's 2-colouring.
  bool split_from_graph() const noexcept { return split_from_graph_; }
  std::size_t outstanding() const noexcept override { return exchange_.outstanding(); }
  const PairwiseCounters& counters() const noexcept { return exchange_.counters(); }

 private:
  AdPsgd(transport::Transport& transport, PeerSet peers, AlgorithmOptions options,
         const topology::Topology* graph);

  // A passive peer's own exchange, once starved (above).
  RoundResult reach_out(std::span<float> params);
  static constexpr int kStarvedAfter = 4;
  // The least a passive peer's reach-out waits for its reply before giving it up.
  static constexpr Clock::duration kFirstExpiryFloor = std::chrono::milliseconds(100);

  PairwiseExchange exchange_;
  Rng rng_;
  std::vector<int> reach_out_to_;   // the graph neighbours, either side
  std::vector<int> everyone_else_;  // the fallback: every other rank
  int starved_rounds_ = 0;          // a passive peer's rounds in a row without a request served
  bool active_ = false;
  bool split_from_graph_ = false;
  std::vector<int> candidates_;
  std::uint64_t served_at_last_round_ = 0;  // a passive peer's requests served by the end of its last round
};

}  // namespace hearsay::algorithms
