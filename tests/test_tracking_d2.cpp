// Gradient tracking and D² (tracking.hpp, d2.hpp) over the in-process transport, on the
// problem they exist for: peers whose data pull them to different optima. Each peer i
// minimises f_i(x) = |x − b_i|² / 2, whose gradient is x − b_i; the network's optimum is
// the mean of the b_i. D-PSGD with a constant step stops short of it: each peer settles
// where its own pull and mixing's balance, O(step / (1 − λ2)) from the optimum. Tracking
// and D² remove that pull: every peer reaches the mean of the b_i itself.
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <memory>
#include <vector>

#include "gossip/mixing/algorithms/d2.hpp"
#include "gossip/mixing/algorithms/dpsgd.hpp"
#include "gossip/mixing/algorithms/tracking.hpp"
#include "graph_algorithm_test_util.hpp"

using namespace hearsay;
using namespace hearsay::algorithms;
using namespace hearsay::algorithms::testing;
using namespace std::chrono_literals;

namespace {

template <class Alg>
double settled_distance(topology::GraphKind kind, int n, int rounds, float step) {
  Network net = make_network(n);
  bool settled = true;
  const double d = hearsay::algorithms::testing::distance_from_optimum<Alg>(
      net.transports, graph_of(kind, n), rounds, step, std::chrono::seconds(60), &settled);
  REQUIRE(settled);
  return d;
}

}  // namespace

TEST_CASE("tracking and D2: peers pulled to different optima all reach the network's",
          "[graphalgo][tracking]") {
  // A step of 0.1 on a ring of 8 (λ2 = 0.8): D-PSGD's peers settle about 0.1 / (1 − 0.8)
  // of the optima's spread (N(0, 1)) away. Tracking and D² restart their correction every
  // kRestartRounds rounds (tracking.hpp: what a lost peer takes with it lasts no longer),
  // so the run ends just before a restart, when the correction has had kRestartRounds − 1
  // rounds to build. That leaves at most a tenth of D-PSGD's distance: on the ring 4% for
  // tracking (the trackers settle, then the models, each at 0.8 a round), 2% for D² on
  // the exponential graph (mixed lazily, d2.hpp).
  static_assert(Tracking::kRestartRounds == D2::kRestartRounds);
  constexpr int n = 8, rounds = 12 * static_cast<int>(Tracking::kRestartRounds);
  constexpr float step = 0.1f;
  for (const auto kind : {topology::GraphKind::ring, topology::GraphKind::exp}) {
    INFO(topology::to_string(kind));
    const double dpsgd = settled_distance<Dpsgd>(kind, n, rounds, step);
    const double tracking = settled_distance<Tracking>(kind, n, rounds, step);
    const double d2 = settled_distance<D2>(kind, n, rounds, step);
    INFO("largest distance from the optimum: dpsgd " << dpsgd << ", tracking " << tracking << ", d2 " << d2);
    CHECK(dpsgd > 0.1);
    CHECK(tracking < 0.1 * dpsgd);
    CHECK(d2 < 0.1 * dpsgd);
  }
}

TEST_CASE("D2 on a directed graph mixes over its undirected version, where its recurrence is stable",
          "[graphalgo][tracking]") {
  // The exponential graph of 32 is directed, and D²'s recurrence with its own (lazy) W has
  // a mode of modulus 1.054 (d2.hpp), which only the restarts every kRestartRounds hold
  // back: mixed as given, D² ended 0.046 from the optimum, a quarter of D-PSGD's 0.18. Over
  // the undirected graph every mode is at most 0.86, and it ends 1e-4 away: the bound is a
  // hundredth of D-PSGD's distance on the same graph.
  constexpr int n = 32, rounds = 12 * static_cast<int>(D2::kRestartRounds);
  constexpr float step = 0.1f;
  const auto graph = graph_of(topology::GraphKind::exp, n);
  REQUIRE(graph.directed());
  const topology::Topology both_ways = graph.undirected();
  CHECK_FALSE(both_ways.directed());
  for (int r = 0; r < n; ++r) {
    CHECK(both_ways.in_neighbours(r) == both_ways.out_neighbours(r));
    CHECK(both_ways.out_neighbours(r).size() == 9);  // ±1, ±2, ±4, ±8, 16
  }
  const double dpsgd = settled_distance<Dpsgd>(topology::GraphKind::exp, n, rounds, step);
  const double d2 = settled_distance<D2>(topology::GraphKind::exp, n, rounds, step);
  INFO("largest distance from the optimum: dpsgd " << dpsgd << ", d2 " << d2);
  CHECK(dpsgd > 0.1);
  CHECK(d2 < 0.01 * dpsgd);
}
