// The algorithm registry (gossip/mixing/algorithms/registry.hpp) against the algorithms
// themselves: every entry builds under its name, needs a graph exactly where it says,
// and the places that used to compare names give what they gave before.
#include <catch2/catch.hpp>
#include <set>
#include <stdexcept>
#include <string>

#include "gossip/mixing/algorithms/algorithm.hpp"
#include "gossip/mixing/algorithms/registry.hpp"
#include "gossip/mixing/topology/topology.hpp"
#include "gossip/network/transport/inproc_transport.hpp"
#include "peer/peer_config.hpp"
#include "sim/peer_setup.hpp"

using namespace hearsay;

TEST_CASE("every registered algorithm builds under its name, with a graph exactly when it needs one",
          "[registry]") {
  auto fabric = transport::InprocFabric::create();
  transport::InprocTransport endpoint{fabric, {"rank0", {"run", "fp"}}};
  topology::GraphSpec spec;
  spec.kind = topology::GraphKind::ring;
  spec.peers = 4;
  const topology::Topology ring = topology::Topology::make(spec);
  std::set<std::string> names;
  for (const auto& traits : algorithms::registered_algorithms()) {
    INFO(traits.name);
    CHECK(names.insert(std::string(traits.name)).second);  // no name twice
    CHECK(algorithms::find_algorithm(traits.name) == &traits);
    algorithms::AlgorithmSetup setup;
    setup.name = std::string(traits.name);
    setup.transport = &endpoint;
    setup.peers.ids = {"rank0", "rank1", "rank2", "rank3"};
    setup.peers.self = 0;
    setup.graph = &ring;
    CHECK(algorithms::make_algorithm(setup)->name() == traits.name);
    setup.graph = nullptr;
    if (traits.needs_graph) {
      CHECK_THROWS_AS(algorithms::make_algorithm(setup), std::invalid_argument);
      CHECK(traits.needs_ranks);  // a graph's vertices are ranks
    } else {
      CHECK(algorithms::make_algorithm(setup)->name() == traits.name);
    }
    CHECK(uses_graph(setup.name) == traits.needs_graph);
    CHECK(uses_ranks(setup.name) == traits.needs_ranks);
    // Overlap is for the lockstep graph algorithms, but local SGD (its rounds are the
    // averages) and those that read their own update off their last result (tracking, d2:
    // a result applied a round late is not the x_t the update was taken at).
    const bool own_result = setup.name == "local" || traits.reads_own_result;
    CHECK(traits.supports_overlap ==
          (traits.pace != algorithms::Pace::free && traits.needs_graph && !own_result));
  }
  CHECK(algorithms::algorithm_names().find(std::string(algorithms::registered_algorithms().back().name)) !=
        std::string::npos);
  CHECK(algorithms::find_algorithm("none") == nullptr);
  CHECK(algorithms::find_algorithm("Gossip") == nullptr);
}

TEST_CASE("the registry's pace says which runs the simulator evaluates at exact steps", "[registry]") {
  // As the simulator always did: lockstep algorithms at exact steps; sgp only without
  // --overlap (its peers then wait for nobody); pairwise ones live.
  for (const bool overlap : {false, true}) {
    CHECK(sim::evaluated_at_exact_steps("allreduce", overlap));
    CHECK(sim::evaluated_at_exact_steps("dpsgd", overlap));
    CHECK(sim::evaluated_at_exact_steps("local", overlap));
    CHECK_FALSE(sim::evaluated_at_exact_steps("gossip", overlap));
    CHECK_FALSE(sim::evaluated_at_exact_steps("adpsgd", overlap));
    CHECK_FALSE(sim::evaluated_at_exact_steps("none", overlap));
  }
  CHECK(sim::evaluated_at_exact_steps("sgp", false));
  CHECK_FALSE(sim::evaluated_at_exact_steps("sgp", true));
  // Only all-reduce and RelaySGD (whose tree a lost peer cuts) stop when a peer is lost, and
  // only all-reduce starts every peer together.
  for (const auto& a : algorithms::registered_algorithms()) {
    CHECK(a.survives_lost_peer == (a.name != "allreduce" && a.name != "relaysgd"));
    CHECK(a.starts_together == (a.name == "allreduce"));
  }
}

TEST_CASE("an algorithm takes a new peer set exactly when the registry says it follows membership",
          "[registry]") {
  // The peer process hands membership's changes to an algorithm only when its traits say
  // follows_membership; the others mix over the ranks of --world, a set that never changes.
  auto fabric = transport::InprocFabric::create();
  transport::InprocTransport endpoint{fabric, {"rank0", {"run", "fp"}}};
  topology::GraphSpec spec;
  spec.kind = topology::GraphKind::ring;
  spec.peers = 4;
  const topology::Topology ring = topology::Topology::make(spec);
  for (const auto& traits : algorithms::registered_algorithms()) {
    INFO(traits.name);
    algorithms::AlgorithmSetup setup;
    setup.name = std::string(traits.name);
    setup.transport = &endpoint;
    setup.peers = {{"rank0", "rank1", "rank2", "rank3"}, 0};
    setup.graph = &ring;
    const auto algorithm = algorithms::make_algorithm(setup);
    CHECK_NOTHROW(algorithm->set_peers(setup.peers));  // the same set: nothing changes
    const algorithms::PeerSet grown{{"rank0", "rank1", "rank2", "rank3", "rank4"}, 0};
    if (traits.follows_membership) {
      algorithm->set_peers(grown);
      CHECK(algorithm->peers().ids == grown.ids);
      // A set without this peer is refused, and the set stays.
      CHECK_THROWS_AS(algorithm->set_peers({{"rank1", "rank2"}, 0}), std::invalid_argument);
      CHECK(algorithm->peers().ids == grown.ids);
    } else {
      CHECK_THROWS_AS(algorithm->set_peers(grown), std::invalid_argument);
      CHECK(algorithm->peers().ids == setup.peers.ids);
    }
  }
}
