// A peer back from rounds apart (ParamsExchange::kApartAfter): the first round it is back,
// D-PSGD and local SGD take the group's values over the lone peer's, exactly.
#include <catch2/catch.hpp>
#include <chrono>

#include "gossip/mixing/algorithms/dpsgd.hpp"
#include "gossip/mixing/algorithms/local.hpp"
#include "graph_algorithm_test_util.hpp"

using namespace hearsay;
using namespace hearsay::algorithms;
using namespace hearsay::algorithms::testing;
using namespace std::chrono_literals;

TEMPLATE_TEST_CASE(
    "graph rounds: a peer back from rounds alone takes its neighbours' values, and they leave its out",
    "[graphalgo][dpsgd][local]", Dpsgd, LocalSgd) {
  // Three peers, each the others' neighbour (a ring of three: D-PSGD weighs 1/3 each; local
  // SGD averages all). Peer 2 is cut off: peers 0 and 1 run six rounds without it, then it
  // runs the same six rounds alone (each side's messages to the other are lost). The link
  // heals, and the round after runs in order: peers 0 and 1 first (peer 2 has sent nothing
  // yet), then peer 2, with their messages of that round already in its mailbox.
  constexpr int n = 3;
  constexpr std::uint64_t apart = ParamsExchange::kApartAfter + 2;
  topology::GraphSpec spec;
  spec.kind = topology::GraphKind::ring;
  spec.peers = n;
  const topology::Topology graph = topology::Topology::make(spec);
  Network net = make_network(n);
  AlgorithmOptions options;
  options.round_timeout = 2s;  // the cut-off rounds wait two learnt waits (50 ms), then none
  auto algs = make_algorithms<TestType>(net, options, graph);
  auto buffers = random_buffers(n, 1000, 39);
  auto all = pointers(algs);

  net.fabric->set_link_trouble(peer_id(2), 0ns, 1.0, 4);
  Schedule cut;
  cut.count = apart;
  run_rounds({all[0], all[1], nullptr}, buffers, cut);
  run_rounds({nullptr, nullptr, all[2]}, buffers, cut);
  net.fabric->set_link_trouble(peer_id(2), 0ns, 0.0, 4);

  const auto group = buffers;  // what each side holds when the partition heals
  Schedule back;
  back.first = apart;
  const RunResult first = run_rounds({all[0], all[1], nullptr}, buffers, back);
  const RunResult second = run_rounds({nullptr, nullptr, all[2]}, buffers, back);
  CHECK(first.results[0][0].exchanged == 1);
  CHECK(second.results[2][0].exchanged == 2);
  // Everyone holds the group's average, 1/2 each (exact: computed in double, rounded once).
  // Before, peer 2 mixed its own values trained alone in at 1/3: what it sent out next
  // brought them into the group.
  for (int rank = 0; rank < n; ++rank) {
    INFO("peer " << rank);
    for (std::size_t i = 0; i < buffers[rank].size(); ++i)
      REQUIRE(buffers[rank][i] == static_cast<float>(0.5 * group[0][i] + 0.5 * group[1][i]));
  }

  // The next round all three run together: peer 2's message of that round is left out
  // by the others (it is back from rounds apart), and its values are theirs anyway.
  Schedule together;
  together.first = apart + 1;
  together.count = 1;
  const auto before = buffers;
  run_rounds(all, buffers, together);
  for (int rank = 0; rank < n; ++rank) {
    INFO("peer " << rank);
    for (std::size_t i = 0; i < buffers[rank].size(); ++i) REQUIRE(buffers[rank][i] == before[0][i]);
  }
}
