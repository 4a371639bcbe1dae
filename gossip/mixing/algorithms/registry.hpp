// The one list of hearsay's mixing algorithms and what each needs and promises. Every
// place that behaves differently per algorithm (flags, the peer, the simulator) asks
// these traits instead of comparing names; make_algorithm (factory.cpp) builds them.
#pragma once
#include <string_view>
#include <vector>

namespace hearsay::algorithms {

// When peers reach step K relative to each other.
enum class Pace {
  lockstep,                  // every round waits for its neighbours: all peers are at step K together
  lockstep_without_overlap,  // as lockstep, but with --overlap nobody waits (push-sum)
  free,                      // pairwise and asynchronous: peers drift apart in steps
};

struct AlgorithmTraits {
  std::string_view name;         // as --algo takes it
  std::string_view description;  // for --help and reports
  bool needs_graph = false;      // mixes over --graph (fixed neighbours)
  bool needs_ranks = false;      // peers find each other by rank: --rank and --world
  std::string_view why_ranks{};  // the reason, for the message when they are missing
  Pace pace = Pace::free;
  bool supports_overlap = false;    // --overlap: rounds run while the next steps train
  bool survives_lost_peer = true;   // trains on when a peer dies (all-reduce stops, naming it)
  bool starts_together = false;     // every peer starts from --seed's initialisation: never pulls a state
  bool follows_membership = false;  // mixes with whoever is alive: the peer set changes with membership
  bool random_partners = false;     // draws partners at random: each peer's draw is seeded by its id
  bool uses_fanout = false;         // --fanout partners per round
  std::string_view topology{};      // what it mixes over in reports: "random", "ring", or "" (the --graph)

  // Whether step K of every peer is one state (so it can be evaluated at that exact step).
  bool lockstep(bool overlap) const {
    return pace == Pace::lockstep || (pace == Pace::lockstep_without_overlap && !overlap);
  }
};

// Every algorithm, in the order --help lists them.
const std::vector<AlgorithmTraits>& registered_algorithms();
// The traits of `name`; nullptr for a name that is no algorithm ("none" included).
const AlgorithmTraits* find_algorithm(std::string_view name);

}  // namespace hearsay::algorithms
