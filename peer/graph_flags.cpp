#include "peer/graph_flags.hpp"

#include <stdexcept>

namespace hearsay {

namespace {
void require(bool ok, const std::string& message) {
  if (!ok) throw std::invalid_argument(message);
}
}  // namespace

topology::GraphSpec graph_spec_from_flags(const GraphFlags& f, const GraphFlagNames& names) {
  using topology::GraphKind;
  topology::GraphSpec spec;
  try {
    spec.kind = topology::parse_graph_kind(f.graph);
  } catch (const topology::TopologyError& e) {
    throw std::invalid_argument(std::string("--graph: ") + e.what());
  }
  const std::string graph = "--graph " + std::string(topology::to_string(spec.kind));
  const std::string file_flag(names.file);
  if (spec.kind == GraphKind::file) {
    require(!f.file.empty(), "--graph file needs " + file_flag + " EDGES (one edge 'a b' per line)");
  } else {
    require(f.file.empty(), file_flag + " is only for --graph file, not " + graph);
    require(names.peers.empty() || f.peers > 0, graph + " needs " + std::string(names.peers) + " N");
  }
  if (spec.kind == GraphKind::random_regular) {
    require(f.degree > 0, "--graph random-regular needs --degree K (K x peers even, K < peers)");
  } else {
    require(f.degree == 0, "--degree is only for --graph random-regular; " + graph + " has a fixed degree");
  }
  require(spec.kind == GraphKind::torus || f.rows == 0, "--rows is only for --graph torus, not " + graph);
  require(!f.directed || (spec.kind != GraphKind::complete && spec.kind != GraphKind::random_regular),
          "--directed does not apply: " + graph + " is undirected");
  spec.peers = f.peers;
  spec.directed = f.directed;
  spec.degree = f.degree;
  spec.seed = f.seed;
  spec.torus_rows = f.rows;
  spec.file = f.file;
  return spec;
}

}  // namespace hearsay
