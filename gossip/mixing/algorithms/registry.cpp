#include "gossip/mixing/algorithms/registry.hpp"

namespace hearsay::algorithms {

const std::vector<AlgorithmTraits>& registered_algorithms() {
  // What is not said is the default of AlgorithmTraits: no graph, no ranks, free pace, no
  // overlap, survives a lost peer, may pull a state, fixed partners.
  constexpr std::string_view kGraphRanks = "fixed graphs give every peer a rank";
  static const std::vector<AlgorithmTraits> all{
      {.name = "gossip",
       .description = "random pairwise gossip (Blot et al. 2016)",
       .follows_membership = true,
       .random_partners = true,
       .uses_fanout = true,
       .topology = "random"},
      {.name = "dpsgd",
       .description = "D-PSGD over a fixed graph (Lian et al. 2017)",
       .needs_graph = true,
       .needs_ranks = true,
       .why_ranks = kGraphRanks,
       .pace = Pace::lockstep,
       .supports_overlap = true},
      {.name = "sgp",
       .description = "stochastic gradient push, push-sum over a directed graph (Assran et al. 2019)",
       .needs_graph = true,
       .needs_ranks = true,
       .why_ranks = kGraphRanks,
       .pace = Pace::lockstep_without_overlap,
       .supports_overlap = true},
      {.name = "adpsgd",
       .description = "asynchronous D-PSGD, pairwise over a bipartite graph (Lian et al. 2018)",
       .needs_graph = true,
       .needs_ranks = true,
       .why_ranks = kGraphRanks},
      {.name = "local",
       .description = "local SGD: neighbourhood averaging every H steps",
       .needs_graph = true,
       .needs_ranks = true,
       .why_ranks = kGraphRanks,
       .pace = Pace::lockstep},
      {.name = "allreduce",
       .description = "ring all-reduce, the centralized baseline",
       .needs_ranks = true,
       .why_ranks = "the ring is ordered by rank",
       .pace = Pace::lockstep,
       .survives_lost_peer = false,
       .starts_together = true,
       .topology = "ring"},
  };
  return all;
}

const AlgorithmTraits* find_algorithm(std::string_view name) {
  for (const auto& a : registered_algorithms())
    if (a.name == name) return &a;
  return nullptr;
}

}  // namespace hearsay::algorithms
