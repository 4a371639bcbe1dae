// The one list of hearsay's mixing algorithms: each is one row (registry.cpp) holding its
// name, what it needs and promises, and its constructor. Every place that behaves
// differently per algorithm (flags, the peer, the simulator, the docs' lists, the
// conformance tests) asks these traits instead of comparing names, and make_algorithm
// builds from the row. A new algorithm is its own files plus one row.
#pragma once
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace hearsay::algorithms {

class Algorithm;
struct AlgorithmSetup;  // algorithm.hpp

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
  bool compresses_differences = false;  // --compress topk:P%, randk:P%, sign, int4: CHOCO-SGD
  bool projects_differences = false;    // --compress powergossip:R: PowerGossip
  bool compresses_low_rank = false;     // --compress powersgd:R: PowerSGD
  // Reads each round's local update off its own last result (tracking, d2): --overlap,
  // which applies a result a round late, is refused.
  bool reads_own_result = false;
  std::string_view topology{};      // what it mixes over in reports: "random", "ring", or "" (the --graph)
  // Mixing alone keeps the sum of the peers' parameters (on a regular graph, with every
  // exchange settled): its averaging is doubly stochastic. The conformance tests hold
  // every algorithm that says so to it.
  bool conserves_sum = true;
  // Builds the algorithm; make_algorithm calls it once the setup is checked against these
  // traits (a graph of the run's size when needs_graph).
  std::unique_ptr<Algorithm> (*make)(const AlgorithmSetup& setup) = nullptr;

  // Whether step K of every peer is one state (so it can be evaluated at that exact step).
  bool lockstep(bool overlap) const {
    return pace == Pace::lockstep || (pace == Pace::lockstep_without_overlap && !overlap);
  }
};

// Every algorithm, in the order --help lists them: the built-in rows, then those added by
// register_algorithm. Elements never move, so pointers to them stay valid.
const std::deque<AlgorithmTraits>& registered_algorithms();
// What a --compress spec other than a value dtype asks of an algorithm.
enum class Compression { differences, projections, low_rank };
Compression compression_of(std::string_view spec);  // for a spec check_compressor_spec accepts
// The algorithms that take that kind of compression, "dpsgd" or "a, b", for messages.
std::string compressing_algorithm_names(Compression kind);
// Why --algo of `traits` cannot send --compress `spec` (a spec that is no compression at
// all included), or nullopt when it can: the one check the peer, the simulator and
// make_algorithm share.
std::optional<std::string> compress_refusal(const AlgorithmTraits& traits, std::string_view spec);
// Why --algo of `traits` cannot run with --overlap (`overlap` true and the algorithm reads
// its update off its own last result), or nullopt: the one check the peer and make_algorithm
// share.
std::optional<std::string> overlap_refusal(const AlgorithmTraits& traits, bool overlap);
// Whether --algo `algo` with --compress `spec` runs CHOCO's D-PSGD (choco.hpp), the one
// algorithm with a look-ahead (--lookahead / --no-lookahead).
bool runs_lookahead(std::string_view algo, std::string_view spec);
// The traits of `name`; nullptr for a name that is no algorithm ("none" included).
const AlgorithmTraits* find_algorithm(std::string_view name);
// Adds an algorithm after the built-in ones (one defined in a test binary or an
// extension), before any run starts: the registry is not locked. Throws
// std::invalid_argument for a name that is taken or empty, "none", or a row without make.
const AlgorithmTraits& register_algorithm(AlgorithmTraits traits);
// The names joined by `separator` ("gossip, dpsgd, ..."), for --help and messages;
// graph_only: those that mix over --graph.
std::string algorithm_names(std::string_view separator = ", ", bool graph_only = false);

}  // namespace hearsay::algorithms
