// Push-sum (SGP) across a receiver's restart, over the in-process transport: a share its
// earlier life applied is not applied again by the new one, so the network's weight is
// exactly what survived plus the new life's 1.
#include <catch2/catch.hpp>
#include <chrono>

#include "gossip/mixing/algorithms/sgp.hpp"
#include "graph_algorithm_test_util.hpp"

using namespace hearsay;
using namespace hearsay::algorithms;
using namespace hearsay::algorithms::testing;
using namespace std::chrono_literals;

namespace {

// What a and b hold (w and pending shares), plus each outstanding share of one that the
// other has not applied: the network's weight when a and b are all of it.
double weight_of(const Sgp& a, int rank_a, const Sgp& b, int rank_b) {
  auto side = [](const Sgp& from, int from_rank, const Sgp& to, int to_rank) {
    double w = from.weight() + from.pending_weight(to_rank);
    if (const auto share = from.outstanding(to_rank);
        share && (to.applied_session(from_rank) != from.session() || to.last_applied(from_rank) < share->seq))
      w += share->weight;
    return w;
  };
  return side(a, rank_a, b, rank_b) + side(b, rank_b, a, rank_a);
}

void rounds(Sgp& s, std::vector<float>& xs, Sgp& r, std::vector<float>& xr, std::uint64_t first, int count) {
  for (std::uint64_t round = first; round < first + static_cast<std::uint64_t>(count); ++round) {
    s.mix(xs, round);
    r.mix(xr, round);
    s.serve(xs, Clock::now() + 5ms);
    r.serve(xr, Clock::now() + 5ms);
  }
}

}  // namespace

TEST_CASE("sgp: a restarted receiver does not apply again a share its earlier life applied",
          "[graphalgo][sgp]") {
  // Receiver R applies sender S's share and dies before its acknowledgement reaches S.
  // S re-sends the share it never heard acknowledged, and R's new life, knowing nothing of
  // S's numbers, started the link from it: the share's mass counted twice, once in the
  // life that died and once in the new one (soak seed 81: 8 peers, one restarted behind a
  // lossy link, ended with a network weight of 9.36 where 9 is the most there can be).
  constexpr int kS = 0, kR = 1;
  topology::GraphSpec spec;
  spec.kind = topology::GraphKind::ring;
  spec.peers = 2;
  const auto graph = topology::Topology::make(spec);
  Network net = make_network(2);
  AlgorithmOptions options;
  options.overlap = true;       // nobody waits; serve() hands over shares and acknowledgements
  options.round_timeout = 5ms;  // an unacknowledged share is re-sent after 5 ms
  auto algs = make_algorithms<Sgp>(net, options, graph);
  auto buffers = random_buffers(2, 50, 81);
  Sgp& s = *algs[kS];

  // A few rounds each way: S learns R's session from its acknowledgements.
  rounds(s, buffers[kS], *algs[kR], buffers[kR], 0, 4);
  s.serve(buffers[kS], Clock::now() + 5ms);  // takes the last acknowledgements
  REQUIRE_FALSE(s.outstanding(kR));
  CHECK(weight_of(s, kS, *algs[kR], kR) == Approx(2.0).epsilon(1e-12));

  // S's next share reaches R, which applies it; everything after is lost (R's
  // acknowledgement, and its own shares), then R dies.
  s.mix(buffers[kS], 4);
  const auto share = s.outstanding(kR);
  REQUIRE(share);
  REQUIRE(share->seq >= 2);  // sent after an acknowledgement: it names R's session
  net.fabric->set_loss(1.0, 81);
  algs[kR]->serve(buffers[kR], Clock::now() + 5ms);
  REQUIRE(algs[kR]->last_applied(kS) == share->seq);
  REQUIRE(s.outstanding(kR));  // S never heard
  const double survived = 2.0 - (algs[kR]->weight() + algs[kR]->pending_weight(kS) +
                                 (algs[kR]->outstanding(kS) ? algs[kR]->outstanding(kS)->weight : 0.0));

  // R restarts (a new push-sum session at w = 1) and the network heals: S re-sends the share.
  algs[kR] = std::make_unique<Sgp>(*net.transports[kR], net.peers(kR), options, graph);
  net.fabric->set_loss(0.0, 81);
  rounds(s, buffers[kS], *algs[kR], buffers[kR], 5, 10);
  s.serve(buffers[kS], Clock::now() + 5ms);

  CHECK(algs[kR]->counters().orphaned == 1);       // the share, taken as applied by the life that died
  CHECK(algs[kR]->last_applied(kS) > share->seq);  // and S's later shares applied
  CHECK(weight_of(s, kS, *algs[kR], kR) == Approx(survived + 1.0).epsilon(1e-12));
}
