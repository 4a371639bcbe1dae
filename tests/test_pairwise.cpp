// Pairwise exchanges (gossip/mixing/algorithms/pairwise.hpp): randomized gossip and AD-PSGD over
// the in-process fabric, without training: one thread per peer calls mix() on its own
// buffer in a loop. The network average must stay put (to float rounding) while the
// peers reach consensus, also when replies come rounds late, when a neighbour dies or
// hangs. Malformed messages and the exchange log: test_pairwise_messages.cpp.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <future>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "base/log.hpp"
#include "gossip/mixing/algorithms/adpsgd.hpp"
#include "gossip/mixing/algorithms/gossip.hpp"
#include "gossip/mixing/algorithms/mixer.hpp"
#include "gossip/network/transport/inproc_transport.hpp"
#include "pairwise_test_util.hpp"

using namespace hearsay;
using namespace hearsay::algorithms;
using namespace hearsay::algorithms::pairwise_testing;
using namespace std::chrono_literals;
using transport::InprocFabric;
using transport::InprocTransport;
using transport::Payload;
using wire::Dtype;
using wire::MessageType;

TEST_CASE("gossip and adpsgd keep the network average while reaching consensus", "[pairwise]") {
  logging::CapturedLines quiet(logging::Level::off);
  const int n = 16;
  // Virtual time (each peer a fiber) measures the algorithm's mixing rate: how many
  // exchanges go through and how far they bring the peers together, the same in every
  // run. On threads the rate is the machine's (under load more requests find their
  // partner busy: a 4.7-fold reduction was seen where 5 was asked), so there only the
  // bookkeeping is held exactly: the average kept, every exchange settled.
  const bool virtual_time = GENERATE(true, false);
  const auto run = [&](const std::string& label, const std::function<Member(Network&, int)>& make,
                       double min_reduction) {
    INFO(label << (virtual_time ? ", virtual time" : ", threads"));
    Network net(n);
    std::vector<Member> members;
    for (int r = 0; r < n; ++r) members.push_back(make(net, r));
    auto buffers = random_buffers(n, kSize, 5);
    const auto ranks = all_ranks(n);
    const auto avg0 = average(buffers, ranks);
    const double dist0 = consensus_distance(buffers, ranks);
    RunSettings settings;
    settings.virtual_time = virtual_time;
    const RunReport report = run_network(net, members, buffers, settings);
    require_no_errors(report);
    REQUIRE(report.drained);
    CHECK(report.stuck.empty());
    const PairwiseCounters total = total_counters(members);
    require_all_settled(total);
    // Peers with nothing to compute are open most of the time, so many requests find
    // their partner busy; still, a good part must go through.
    INFO(total.applied << " of " << total.started << " exchanges applied");
    if (virtual_time) CHECK(total.applied * 5 >= total.started);
    // The deltas of an exchange cancel exactly before rounding to float; what is left is
    // one float rounding (2^-24 relative) per element per update, a random walk far
    // below 1e-6 of the average after a few thousand updates.
    const double drift = relative_drift(avg0, average(buffers, ranks));
    const double dist = consensus_distance(buffers, ranks);
    INFO("relative drift " << drift << ", consensus distance " << dist0 << " -> " << dist);
    CHECK(drift <= 1e-6);
    CHECK(dist * (virtual_time ? min_reduction : 2.0) <= dist0);
  };

  // Reduction factors: 100 rounds of pairwise averaging contract the consensus distance
  // geometrically; the bounds below are far under what the rates give (randomized
  // gossip on the complete graph: about 1/2 of the spread per exchange; AD-PSGD on the
  // bipartite complete graph similar) and still fail for an algorithm that barely mixes.
  // f32 bottoms out near float rounding (1e-7 of the values), hence 1e4 at most.
  SECTION("gossip, fanout 1") {
    run(
        "gossip k=1", [](Network& net, int r) { return gossip_member(net, r, options_with(2s, 1)); }, 1e4);
  }
  SECTION("gossip, fanout 3") {
    run(
        "gossip k=3", [](Network& net, int r) { return gossip_member(net, r, options_with(2s, 3)); }, 1e4);
  }
  SECTION("gossip, int8 payloads") {
    // Compressed payloads still cancel exactly (each side mixes with the decoded values
    // the other side sees), but consensus stalls near the int8 step (max|x|/127 per chunk
    // of 256, about 0.03 per element here against an initial spread of 1): 100x.
    run(
        "gossip int8",
        [](Network& net, int r) { return gossip_member(net, r, options_with(2s, 2, Dtype::int8)); }, 100);
  }
  SECTION("gossip, compressed differences over link copies") {
    // CHOCO's exchange (link_copies.hpp): both ends move by the difference of the same two
    // copies, so the average is kept as exactly as with values. Consensus is slower: each
    // exchange moves gamma alpha of the copies' difference, and the copies trail the values
    // by what the compressor left out.
    const std::string compressor = GENERATE("sign", "topk:10%", "int4");
    auto o = options_with(2s, 1);
    o.compressor = compressor;
    run(
        "gossip " + compressor, [&](Network& net, int r) { return gossip_member(net, r, o); }, 3);
  }
  SECTION("adpsgd, even/odd split") {
    // Passive peers wait at most one round deadline for a request that never comes once
    // the active peers are done: a short deadline keeps the test quick.
    run(
        "adpsgd", [](Network& net, int r) { return adpsgd_member(net, r, options_with(300ms), nullptr); },
        1e4);
  }
  SECTION("adpsgd on a ring (bipartite: its 2-colouring)") {
    // A ring of 16 mixes slowly (second eigenvalue of its pairwise averaging close to 1):
    // 100 rounds of 8 exchanges shrink the spread by a factor of about 30, hence 5.
    const auto ring = make_graph(topology::GraphKind::ring, n);
    run(
        "adpsgd ring", [&](Network& net, int r) { return adpsgd_member(net, r, options_with(300ms), &ring); },
        5);
  }
  SECTION("adpsgd on the exponential graph (not bipartite: even/odd)") {
    // For n a power of two the only edges between even and odd ranks are i -> i±1
    // (the other hops are even), so the active/passive exchanges run on a ring: as slow
    // as the ring above.
    const auto exp = make_graph(topology::GraphKind::exp, n);
    run(
        "adpsgd exp", [&](Network& net, int r) { return adpsgd_member(net, r, options_with(300ms), &exp); },
        5);
  }
}

TEST_CASE("gossip skips its own round after a partner averaged with it, unless told not to", "[pairwise]") {
  logging::CapturedLines quiet(logging::Level::off);
  for (const bool skip : {true, false}) {
    INFO("always_start_round " << !skip);
    Network net(2);
    auto o = options_with(5s);
    o.always_start_round = !skip;
    Gossip a(net.end(0), net.peers(0), o), b(net.end(1), net.peers(1), o);
    auto buffers = random_buffers(2, kSize, 3);
    CHECK(a.round_needed());  // nobody averaged with a yet
    CHECK(a.round_needed());

    // b's round averages with a (its only partner) while a serves.
    auto round = std::async(std::launch::async, [&] { return b.mix(buffers[1], 0); });
    while (round.wait_for(0s) != std::future_status::ready) a.serve(buffers[0], Clock::now() + 10ms);
    REQUIRE(round.get().exchanged == 1);
    REQUIRE(a.counters().served == 1);
    CHECK(buffers[0] == buffers[1]);  // both hold the pair's average

    CHECK(a.round_needed() == !skip);  // the exchange b started averaged a already
    CHECK(a.round_needed());           // only once: the next step has its round again
    CHECK(b.round_needed());           // b's own round is no reason for b to skip one
  }
}

TEST_CASE("a late reply is applied by a later call, a reply after the request was given up is dropped",
          "[pairwise]") {
  logging::CapturedLines quiet(logging::Level::off);
  // In virtual time: the rounds race the 100 ms expiry with their own waits only, never
  // with the machine's load.
  in_virtual_time([] {
    Network net(2);
    auto o = options_with(2s);
    o.always_start_round = true;
    Gossip a(net.end(0), net.peers(0), o), b(net.end(1), net.peers(1), o);
    a.set_compute_per_round(6ms);
    auto buffers = random_buffers(2, kSize, 9);
    // First a few exchanges, so that a knows b's round trips (none at all in virtual
    // time): its rounds then wait the floor of the learnt wait for a reply, and give a
    // request up after 100 ms (the floor of the expiry).
    std::uint64_t round = 0;
    for (; round < 200 && (a.counters().applied < 6 || a.outstanding() > 0); ++round) {
      bool mixed = false;
      {
        fiber::Worker mixer("a", [&] {
          a.mix(buffers[0], round);
          mixed = true;
        });
        while (!mixed) b.serve(buffers[1], Clock::now() + 1ms);
      }
      for (const auto give_up = Clock::now() + 5s; a.outstanding() > 0 && Clock::now() < give_up;) {
        b.serve(buffers[1], Clock::now() + 1ms);
        a.serve(buffers[0], Clock::now() + 1ms);
      }
    }
    REQUIRE(a.counters().applied >= 6);
    REQUIRE(a.outstanding() == 0);
    const PairwiseCounters a_before = a.counters();
    const std::uint64_t b_served = b.counters().served;
    for (auto& x : buffers[1]) x += 2.0f;  // far apart, so that a half-applied exchange shows in the sum
    const auto sum = [&] {
      double s = 0;
      for (const auto& buffer : buffers)
        for (const float x : buffer) s += x;
      return s;
    };
    const double sum0 = sum();
    const auto a0 = buffers[0];
    a.exchanges().drain();

    // b answers nothing while a runs three rounds: a's request of the first is not
    // answered in its round, and the next rounds start none while it is out (exchanges
    // must not overlap). Only the first waits, and far less than the 100 ms expiry.
    const auto asked = Clock::now();
    for (int i = 0; i < 3; ++i) {
      const RoundResult r = a.mix(buffers[0], round++);
      CHECK(r.exchanged == 0);
      CHECK(r.timed_out == 0);  // still within its expiry
    }
    CHECK(Clock::now() - asked < 100ms);
    REQUIRE(a.counters().started == a_before.started + 1);
    CHECK(a.outstanding() == 1);
    CHECK(buffers[0] == a0);
    a.exchanges().drain();

    // b answers it now and applies its half: on its own that moves the sum.
    b.serve(buffers[1], Clock::now() + 2ms);
    CHECK(b.counters().served == b_served + 1);
    CHECK(std::abs(sum() - sum0) > 100.0);

    SECTION("in time: applied late, both halves in, the sum is back") {
      // The tolerance is float rounding: one 2^-24 relative rounding per element and update.
      a.serve(buffers[0], Clock::now() + 20ms);
      CHECK(a.counters().applied == a_before.applied + 1);
      CHECK(a.counters().applied_late == a_before.applied_late + 1);
      CHECK(a.outstanding() == 0);
      CHECK(std::abs(sum() - sum0) <= 1e-6 * std::abs(sum0));
      const auto records = a.exchanges().drain();
      REQUIRE(records.size() == 1);
      CHECK(records[0].outcome == ExchangeRecord::Outcome::ok);
      CHECK(records[0].partner == "p1");
      CHECK_THAT(records[0].detail, Catch::Contains("late"));
    }
    SECTION("after its expiry: given up, and the reply is dropped, not applied") {
      fiber::sleep_until(asked + 150ms);  // past the 100 ms expiry
      a.serve(buffers[0], Clock::now() + 20ms);
      CHECK(a.counters().expired == a_before.expired + 1);
      CHECK(a.counters().dropped_late == a_before.dropped_late + 1);
      CHECK(a.counters().applied == a_before.applied);
      CHECK(a.outstanding() == 0);
      CHECK(buffers[0] == a0);
      const auto records = a.exchanges().drain();
      REQUIRE(records.size() == 1);
      CHECK(records[0].outcome == ExchangeRecord::Outcome::timed_out);
      // The snapshot closed with it: the next round starts a request again.
      a.mix(buffers[0], round);
      CHECK(a.counters().started == a_before.started + 2);
    }
  });
}

TEST_CASE("interleaved exchanges with replies rounds late conserve the sum", "[pairwise]") {
  logging::CapturedLines quiet(logging::Level::off);
  const int n = 16;
  const bool adpsgd = GENERATE(false, true);
  INFO((adpsgd ? "adpsgd" : "gossip k=2"));
  Network net(n);
  // Even and odd ranks take turns: every request across the halves is answered only in
  // the other half's turn, after its round's deadline, and its reply is applied in the
  // requester's next round, on a buffer that has changed meanwhile. (Under AD-PSGD the
  // even ranks are the active ones, so every exchange crosses.)
  // Once round trips are known (a first phase without turns), a round waits at most 10 ms
  // (half the compute of a round); a request is given up after 4 round trips, at least
  // 100 ms. In virtual time, so that a turn lasts what the rounds waited: on threads, a
  // turn of eight peers on a loaded machine outlasted the expiry now and then, and the
  // reply to an expired request is dropped by design (the late-reply test covers that).
  const auto o = options_with(2s, 2);
  std::vector<Member> members;
  for (int r = 0; r < n; ++r) {
    members.push_back(adpsgd ? adpsgd_member(net, r, o, nullptr) : gossip_member(net, r, o));
    members.back().algorithm->set_compute_per_round(20ms);
  }
  auto buffers = random_buffers(n, kSize, 21);
  const auto ranks = all_ranks(n);
  const auto avg0 = average(buffers, ranks);
  const double dist0 = consensus_distance(buffers, ranks);
  RunSettings warm;
  warm.rounds = 10;
  warm.virtual_time = true;
  const RunReport warm_report = run_network(net, members, buffers, warm);
  require_no_errors(warm_report);
  CHECK(warm_report.stuck.empty());
  const PairwiseCounters warmed = total_counters(members);
  RunSettings s;
  s.rounds = 20;
  s.take_turns = true;
  s.virtual_time = true;
  const RunReport report = run_network(net, members, buffers, s);
  require_no_errors(report);
  REQUIRE(report.drained);
  CHECK(report.stuck.empty());
  const PairwiseCounters total = total_counters(members);
  CHECK(total.applied_late > warmed.applied_late);
  if (adpsgd) CHECK(total.applied_late - warmed.applied_late == total.applied - warmed.applied);
  CHECK(total.unmatched_replies == 0);
  require_all_settled(total);
  const double drift = relative_drift(avg0, average(buffers, ranks));
  const double dist = consensus_distance(buffers, ranks);
  INFO("relative drift " << drift << ", consensus distance " << dist0 << " -> " << dist);
  CHECK(drift <= 1e-6);
  CHECK(dist * 10 <= dist0);  // late replies mix all the same
}

TEST_CASE("a dead or a hung neighbour never holds a round past its deadline", "[pairwise]") {
  logging::CapturedLines quiet(logging::Level::off);
  const int n = 16;
  const bool adpsgd = GENERATE(false, true);
  // Virtual time (each peer a fiber) measures what the algorithm decided: a round lasts
  // exactly as long as it waited. Threads run the same code as a peer process does, races
  // included, where the time of a round also counts the machine's load.
  const bool virtual_time = GENERATE(true, false);
  INFO((adpsgd ? "adpsgd" : "gossip k=3") << (virtual_time ? ", virtual time" : ", threads"));
  const auto deadline = 400ms;
  Network net(n);
  const auto o = options_with(deadline, 3);
  std::vector<Member> members;
  for (int r = 0; r < n; ++r)
    members.push_back(adpsgd ? adpsgd_member(net, r, o, nullptr) : gossip_member(net, r, o));
  auto buffers = random_buffers(n, kSize, 33);
  // p3 dies after 5 rounds (its partners learn it at once: the fabric tells them); p7
  // lives but never answers (a hung process: requests to it only time out). Both are
  // passive peers under AD-PSGD, so that active peers pick them.
  RunSettings s;
  s.rounds = 40;
  s.drain = false;
  s.kill_rank = 3;
  s.kill_after = 5;
  s.silent = {7};
  s.virtual_time = virtual_time;
  std::vector<int> survivors;
  for (int r = 0; r < n; ++r)
    if (r != 3 && r != 7) survivors.push_back(r);
  const double dist0 = consensus_distance(buffers, survivors);
  const RunReport report = run_network(net, members, buffers, s);
  require_no_errors(report);
  CHECK(report.stuck.empty());
  double longest = 0;
  const double deadline_s = std::chrono::duration<double>(deadline).count();
  for (const int r : survivors)
    for (const double t : report.mix_seconds[static_cast<std::size_t>(r)]) longest = std::max(longest, t);
  INFO("longest round " << longest << " s");
  std::uint64_t waited_out = 0;
  for (const int r : survivors)
    waited_out += members[static_cast<std::size_t>(r)].algorithm->exchanges().totals().timed_out;
  INFO(waited_out << " exchanges timed out");
  // The hung peer was picked and waited for, or the bound below would hold for anything.
  CHECK(waited_out > 0);
  if (virtual_time) {
    // Nothing but waiting takes virtual time: a round that waited on the hung peer lasts
    // at most its deadline, to the nanosecond; one that waited on the hung peer and then
    // on the dead one (or on each partner in turn) would last up to two.
    CHECK(longest <= deadline_s + 1e-9);
  } else {
    // Threads: only a hang guard. The deadline plus a margin for waking up and finishing
    // the message in hand, with 16 threads sharing the cores, and for a loaded machine;
    // the exact bound is the virtual-time run's.
    CHECK(longest <= deadline_s + 1.5);
  }
  const double dist = consensus_distance(buffers, survivors);
  INFO("survivors' consensus distance " << dist0 << " -> " << dist);
  // The survivors keep mixing among themselves: 35 rounds after the death reduce their
  // spread about 10^6-fold on an idle machine (rates as in the first test case), but only
  // 30-fold was seen with the 16 threads sharing 2 cores with another test, as partners
  // found each other busy more often. Stalled mixing would leave it near dist0: 10-fold
  // tells the two apart without depending on the machine's load.
  CHECK(dist * 10 <= dist0);
}

TEST_CASE("the active/passive split follows a bipartite graph and falls back to even/odd", "[pairwise]") {
  const auto ring16 = make_graph(topology::GraphKind::ring, 16);
  const auto split = split_active_passive(16, &ring16);
  CHECK(split.from_graph);
  for (int r = 0; r < 16; ++r) CHECK(split.active[static_cast<std::size_t>(r)] == (r % 2 == 0));

  topology::GraphSpec torus;
  torus.kind = topology::GraphKind::torus;
  torus.peers = 16;
  torus.torus_rows = 4;
  const auto torus16 = topology::Topology::make(torus);
  const auto torus_split = split_active_passive(16, &torus16);
  CHECK(torus_split.from_graph);
  // Rows of 4: rank r sits at (r / 4, r % 4); its colour is the parity of row + column.
  for (int r = 0; r < 16; ++r)
    CHECK(torus_split.active[static_cast<std::size_t>(r)] == ((r / 4 + r % 4) % 2 == 0));

  // An odd cycle and the complete graph are not bipartite.
  for (const auto& g :
       {make_graph(topology::GraphKind::ring, 5), make_graph(topology::GraphKind::complete, 6)}) {
    const auto fallback = split_active_passive(g.peers(), &g);
    CHECK_FALSE(fallback.from_graph);
    for (int r = 0; r < g.peers(); ++r) CHECK(fallback.active[static_cast<std::size_t>(r)] == (r % 2 == 0));
  }
  CHECK_THROWS_AS(split_active_passive(8, &ring16), std::invalid_argument);

  // Active peers choose among their passive neighbours.
  Network net(16);
  AdPsgd zero(net.end(0), net.peers(0), options_with(1s), ring16);
  AdPsgd two(net.end(2), net.peers(2), options_with(1s), ring16);
  AdPsgd three(net.end(3), net.peers(3), options_with(1s), ring16);
  CHECK(zero.split_from_graph());
  CHECK(zero.candidates() == std::vector<int>{1, 15});
  CHECK(two.candidates() == std::vector<int>{1, 3});
  CHECK_FALSE(three.active());
  CHECK(three.candidates().empty());
}

TEST_CASE("pairwise algorithms refuse settings they cannot run with", "[pairwise]") {
  Network net(2);
  CHECK_THROWS_AS(Gossip(net.end(0), net.peers(0), options_with(1s, 0)), std::invalid_argument);
  CHECK_THROWS_AS(Gossip(net.end(0), net.peers(1), options_with(1s)), std::invalid_argument);
  CHECK_THROWS_AS(Gossip(net.end(0), PeerSet{net.ids, 5}, options_with(1s)), std::invalid_argument);
  CHECK_THROWS_AS(AdPsgd(net.end(0), net.peers(0), options_with(0s)), std::invalid_argument);
  CHECK_THROWS_AS(AdPsgd(net.end(0), net.peers(0), options_with(1s, 1, Dtype::none)), std::invalid_argument);
  CHECK_THROWS_AS(AdPsgd(net.end(0), PeerSet{{"p0", "p0"}, 0}, options_with(1s)), std::invalid_argument);
  // The buffer size is fixed by the first call.
  Gossip g(net.end(0), net.peers(0), options_with(1ms));
  std::vector<float> x(10, 1.0f), y(11, 1.0f);
  g.serve(x, Clock::now());
  CHECK_THROWS_AS(g.serve(y, Clock::now()), std::invalid_argument);
}
