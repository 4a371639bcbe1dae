// The graph flags `hearsay topology` and `hearsay peer` share (--graph, --directed,
// --rows, --degree, a seed and an edge-list file) and the one set of rules for which
// combinations make a graph.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "gossip/mixing/topology/topology.hpp"

namespace hearsay {

struct GraphFlags {
  std::string graph;  // ring, torus, exp, onepeer-exp, complete, random-regular, file
  int peers = 0;      // 0: not given
  bool directed = false;
  int rows = 0;    // torus (0: the most square factorisation)
  int degree = 0;  // random-regular
  std::uint64_t seed = 0;
  std::string file;  // edge list for --graph file
};

// Names of the flags whose spelling differs between the commands, for the messages.
struct GraphFlagNames {
  std::string_view file;   // "--file" or "--graph-file"
  std::string_view peers;  // "--peers"; empty: the caller checks the peer count itself
};

// Checks the combination and builds the spec (Topology::make checks the rest).
// std::invalid_argument naming the flags otherwise.
topology::GraphSpec graph_spec_from_flags(const GraphFlags& flags, const GraphFlagNames& names);

}  // namespace hearsay
