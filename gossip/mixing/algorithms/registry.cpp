#include "gossip/mixing/algorithms/registry.hpp"

#include <stdexcept>

#include "gossip/mixing/algorithms/adpsgd.hpp"
#include "gossip/mixing/algorithms/algorithm.hpp"
#include "gossip/mixing/algorithms/allreduce.hpp"
#include "gossip/mixing/algorithms/choco.hpp"
#include "gossip/mixing/algorithms/d2.hpp"
#include "gossip/mixing/algorithms/dpsgd.hpp"
#include "gossip/mixing/algorithms/gossip.hpp"
#include "gossip/mixing/algorithms/local.hpp"
#include "gossip/mixing/algorithms/power_gossip.hpp"
#include "gossip/mixing/algorithms/powersgd.hpp"
#include "gossip/mixing/algorithms/relaysgd.hpp"
#include "gossip/mixing/algorithms/sgp.hpp"
#include "gossip/mixing/algorithms/tracking.hpp"
#include "gossip/mixing/compress/compressor.hpp"
#include "gossip/network/wire/header.hpp"

namespace hearsay::algorithms {

namespace {

// D-PSGD, or over the same graph PowerGossip with powergossip:R, CHOCO-SGD with a
// compressor of differences.
std::unique_ptr<Algorithm> make_dpsgd(const AlgorithmSetup& s) {
  if (compress::power_gossip(s.options.compressor))
    return std::make_unique<PowerGossip>(*s.transport, s.peers, s.options, *s.graph);
  if (!s.options.compressor.empty())
    return std::make_unique<Choco>(*s.transport, s.peers, s.options, *s.graph);
  return std::make_unique<Dpsgd>(*s.transport, s.peers, s.options, *s.graph);
}

// Ring all-reduce, or with powersgd:R PowerSGD over the same ring.
std::unique_ptr<Algorithm> make_allreduce(const AlgorithmSetup& s) {
  if (!s.options.compressor.empty())
    return std::make_unique<PowerSgdAllReduce>(*s.transport, s.peers, s.options);
  return std::make_unique<RingAllReduce>(*s.transport, s.peers, s.options);
}

// The constructor of a row: Alg(transport, peers, options[, graph]).
template <class Alg>
std::unique_ptr<Algorithm> make(const AlgorithmSetup& s) {
  if constexpr (std::is_constructible_v<Alg, transport::Transport&, PeerSet, AlgorithmOptions,
                                        const topology::Topology&>)
    return std::make_unique<Alg>(*s.transport, s.peers, s.options, *s.graph);
  else
    return std::make_unique<Alg>(*s.transport, s.peers, s.options);
}

// A row of an algorithm that mixes over --graph: its peers need ranks.
AlgorithmTraits over_graph(AlgorithmTraits traits) {
  traits.needs_graph = true;
  traits.needs_ranks = true;
  traits.why_ranks = "fixed graphs give every peer a rank";
  return traits;
}

std::deque<AlgorithmTraits>& rows() {
  // What is not said is the default of AlgorithmTraits: no graph, no ranks, free pace, no
  // overlap, survives a lost peer, may pull a state, fixed partners, conserves the sum.
  static std::deque<AlgorithmTraits> all{
      {.name = "gossip",
       .description =
           "randomized gossip: symmetric pairwise averaging with random partners (Boyd et al. 2006)",
       .follows_membership = true,
       .random_partners = true,
       .uses_fanout = true,
       .compresses_differences = true,
       .topology = "random",
       .make = make<Gossip>},
      over_graph({.name = "dpsgd",
                  .description = "D-PSGD over a fixed graph (Lian et al. 2017)",
                  .pace = Pace::lockstep,
                  .supports_overlap = true,
                  .compresses_differences = true,
                  .projects_differences = true,
                  .make = make_dpsgd}),
      over_graph(
          {.name = "sgp",
           .description = "stochastic gradient push, push-sum over a directed graph (Assran et al. 2019)",
           .pace = Pace::lockstep_without_overlap,
           .supports_overlap = true,
           .make = make<Sgp>}),
      over_graph({.name = "adpsgd",
                  .description = "asynchronous D-PSGD, pairwise over a bipartite graph (Lian et al. 2018)",
                  .make = make<AdPsgd>}),
      over_graph({.name = "local",
                  .description = "local SGD: neighbourhood averaging over --graph every H steps",
                  .pace = Pace::lockstep,
                  .make = make<LocalSgd>}),
      over_graph({.name = "tracking",
                  .description =
                      "gradient tracking over a fixed graph: mixes a tracker of the average update too "
                      "(DIGing; Koloskova et al. 2021)",
                  .pace = Pace::lockstep,
                  .reads_own_result = true,
                  .make = make<Tracking>}),
      over_graph(
          {.name = "d2",
           .description = "D², decentralized training robust to the peers' data variance (Tang et al. 2018)",
           .pace = Pace::lockstep,
           .reads_own_result = true,
           .make = make<D2>}),
      over_graph({.name = "relaysgd",
                  .description =
                      "RelaySGD: sums relayed along a spanning tree of --graph, so every peer averages "
                      "every model (Vogels et al. 2021)",
                  .pace = Pace::lockstep,
                  .survives_lost_peer = false,  // a lost leaf it survives; a peer with others behind it, not
                  .reads_own_result = true,
                  .conserves_sum = false,  // it averages delayed models: an unbiased mean, not a kept sum
                  .make = make<RelaySgd>}),
      {.name = "allreduce",
       .description = "ring all-reduce, the centralized baseline",
       .needs_ranks = true,
       .why_ranks = "the ring is ordered by rank",
       .pace = Pace::lockstep,
       .survives_lost_peer = false,
       .starts_together = true,
       .compresses_low_rank = true,
       .topology = "ring",
       .make = make_allreduce},
  };
  return all;
}

}  // namespace

const std::deque<AlgorithmTraits>& registered_algorithms() { return rows(); }

const AlgorithmTraits* find_algorithm(std::string_view name) {
  for (const auto& a : rows())
    if (a.name == name) return &a;
  return nullptr;
}

const AlgorithmTraits& register_algorithm(AlgorithmTraits traits) {
  if (traits.name.empty() || traits.name == "none" || find_algorithm(traits.name) != nullptr)
    throw std::invalid_argument("register_algorithm: the name '" + std::string(traits.name) +
                                "' is empty, \"none\" or taken");
  if (traits.make == nullptr)
    throw std::invalid_argument("register_algorithm: '" + std::string(traits.name) + "' has no constructor");
  return rows().emplace_back(traits);
}

std::string algorithm_names(std::string_view separator, bool graph_only) {
  std::string out;
  for (const auto& a : rows())
    if (!graph_only || a.needs_graph) out += std::string(out.empty() ? "" : separator) + std::string(a.name);
  return out;
}

Compression compression_of(std::string_view spec) {
  if (compress::low_rank(spec)) return Compression::low_rank;
  if (compress::power_gossip(spec)) return Compression::projections;
  return Compression::differences;
}

namespace {

bool takes(const AlgorithmTraits& t, Compression kind) {
  switch (kind) {
    case Compression::differences:
      return t.compresses_differences;
    case Compression::projections:
      return t.projects_differences;
    case Compression::low_rank:
      return t.compresses_low_rank;
  }
  return false;
}

// What --algo of `traits` takes besides values, for a refusal's message.
std::string what_else(const AlgorithmTraits& t) {
  std::string out;
  if (t.compresses_differences) out += ", or topk:P%, randk:P%, sign, int4 (CHOCO-SGD)";
  if (t.projects_differences)
    out += std::string(out.empty() ? ", or" : " or") + " powergossip:R (PowerGossip)";
  if (t.compresses_low_rank) out += ", or powersgd:R (PowerSGD)";
  return out;
}

}  // namespace

std::string compressing_algorithm_names(Compression kind) {
  std::string out;
  for (const auto& t : registered_algorithms())
    if (takes(t, kind)) out += (out.empty() ? "" : ", ") + std::string(t.name);
  return out;
}

std::optional<std::string> compress_refusal(const AlgorithmTraits& traits, std::string_view spec) {
  if (wire::parse_value_dtype(spec)) return std::nullopt;  // values: every algorithm sends them
  if (auto why = compress::check_compressor_spec(spec)) return why;
  const Compression kind = compression_of(spec);
  if (takes(traits, kind)) return std::nullopt;
  const char* what = kind == Compression::low_rank ? " sends low-rank updates (PowerSGD), which --algo "
                     : kind == Compression::projections
                         ? " sends low-rank projections of neighbour differences "
                           "(PowerGossip), which --algo "
                         : " sends compressed differences (CHOCO-SGD), which --algo ";
  const std::string takers = compressing_algorithm_names(kind);
  const char* take = takers.find(", ") == std::string::npos ? " takes" : " take";
  return "--compress " + std::string(spec) + what + takers + take + "; --algo " + std::string(traits.name) +
         " sends values: use --compress f16, bf16 or int8" + what_else(traits);
}

std::optional<std::string> overlap_refusal(const AlgorithmTraits& traits, bool overlap) {
  if (!overlap || !traits.reads_own_result) return std::nullopt;
  return "--overlap: --algo " + std::string(traits.name) +
         " reads each round's update off its own last result, which --overlap applies a round late; leave "
         "--overlap out";
}

bool runs_lookahead(std::string_view algo, std::string_view spec) {
  return algo == "dpsgd" && compress::is_difference_compressor(spec);
}

std::unique_ptr<Algorithm> make_algorithm(const AlgorithmSetup& setup) {
  if (!setup.transport) throw std::invalid_argument("make_algorithm: no transport");
  const AlgorithmTraits* traits = find_algorithm(setup.name);
  if (traits == nullptr)
    throw std::invalid_argument("unknown algorithm '" + setup.name + "'; choose one of: " + algorithm_names());
  if (traits->needs_graph) {
    if (!setup.graph)
      throw std::invalid_argument("algorithm '" + setup.name + "' mixes over a graph: give one (--graph)");
    check_graph_matches(setup.name, *setup.graph, setup.peers.size());
  }
  if (!setup.options.compressor.empty())
    if (auto why = compress_refusal(*traits, setup.options.compressor)) throw std::invalid_argument(*why);
  if (auto why = overlap_refusal(*traits, setup.options.overlap)) throw std::invalid_argument(*why);
  return traits->make(setup);
}

}  // namespace hearsay::algorithms
