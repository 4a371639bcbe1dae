// make_algorithm: the one place that knows every algorithm class.
#include <stdexcept>

#include "gossip/mixing/algorithms/adpsgd.hpp"
#include "gossip/mixing/algorithms/algorithm.hpp"
#include "gossip/mixing/algorithms/allreduce.hpp"
#include "gossip/mixing/algorithms/dpsgd.hpp"
#include "gossip/mixing/algorithms/gossip_sgd.hpp"
#include "gossip/mixing/algorithms/local_sgd.hpp"
#include "gossip/mixing/algorithms/pushsum.hpp"
#include "gossip/mixing/algorithms/registry.hpp"

namespace hearsay::algorithms {

const std::vector<std::string>& algorithm_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& a : registered_algorithms()) v.emplace_back(a.name);
    return v;
  }();
  return names;
}

namespace {
std::string joined_names() {
  std::string out;
  for (const auto& n : algorithm_names()) out += (out.empty() ? "" : ", ") + n;
  return out;
}

const topology::Topology& require_graph(const AlgorithmSetup& setup) {
  if (!setup.graph)
    throw std::invalid_argument("algorithm '" + setup.name + "' mixes over a graph: give one (--graph)");
  if (setup.graph->peers() != setup.peers.size())
    throw std::invalid_argument("algorithm '" + setup.name + "': the graph has " +
                                std::to_string(setup.graph->peers()) + " peers but the run has " +
                                std::to_string(setup.peers.size()) +
                                " (--world must match --peers of the graph)");
  return *setup.graph;
}
}  // namespace

std::unique_ptr<Algorithm> make_algorithm(const AlgorithmSetup& setup) {
  if (!setup.transport) throw std::invalid_argument("make_algorithm: no transport");
  if (setup.peers.size() < 1 || setup.peers.self < 0 || setup.peers.self >= setup.peers.size())
    throw std::invalid_argument("make_algorithm: rank " + std::to_string(setup.peers.self) +
                                " is not in 0.." + std::to_string(setup.peers.size() - 1));
  auto& t = *setup.transport;
  const auto& name = setup.name;
  if (name == "gossip") return std::make_unique<RandomGossip>(t, setup.peers, setup.options);
  if (name == "allreduce") return std::make_unique<RingAllReduce>(t, setup.peers, setup.options);
  if (name == "dpsgd") return std::make_unique<Dpsgd>(t, setup.peers, setup.options, require_graph(setup));
  if (name == "sgp") return std::make_unique<PushSum>(t, setup.peers, setup.options, require_graph(setup));
  if (name == "adpsgd") return std::make_unique<AdPsgd>(t, setup.peers, setup.options, require_graph(setup));
  if (name == "local") return std::make_unique<LocalSgd>(t, setup.peers, setup.options, require_graph(setup));
  throw std::invalid_argument("unknown algorithm '" + name + "'; choose one of: " + joined_names());
}

}  // namespace hearsay::algorithms
