// Pairwise exchanges (gossip/mixing/algorithms/pairwise.hpp) and their messages: a
// malformed request or reply is refused without touching the buffer, and every exchange
// is logged on both sides with its partner, bytes and distance.
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

TEST_CASE("malformed requests and replies are refused without touching the buffer", "[pairwise]") {
  logging::CapturedLines quiet(logging::Level::off);
  // p0 runs gossip; the test speaks for p1 and p2 through their raw transports.
  Network net(3);
  transport::InprocOptions so;
  so.id = "stranger";
  so.expect = expectation();
  InprocTransport stranger(net.fabric, so);
  stranger.connect("p0", InprocFabric::address_for("p0"));
  auto& p1 = net.end(1);
  auto& p2 = net.end(2);
  Gossip a(net.end(0), net.peers(0), options_with(2s, 2));
  std::vector<float> x(kSize, 1.0f);
  const auto x0 = x;

  const auto push = [](transport::Transport& from, double weight, std::size_t count) {
    wire::Header h;
    h.type = MessageType::params_push;
    h.weight = weight;
    h.nonce = 77;
    from.send("p0", h, Payload::copy_f32(std::vector<float>(count, 5.0f)));
  };
  push(p1, 0.75, kSize);  // alpha above 1/2 would overshoot the average
  push(p1, 0.0, kSize);
  push(p1, -0.25, kSize);
  push(p1, 0.5, kSize - 1);
  push(p1, 0.5, kSize + 1);
  push(stranger, 0.5, kSize);                                 // not in the run's peer set
  push(p1, std::numeric_limits<double>::quiet_NaN(), kSize);  // dropped on admission already
  push(p1, std::numeric_limits<double>::infinity(), kSize);
  a.serve(x, Clock::now() + 50ms);
  CHECK(x == x0);
  CHECK(a.counters().refused_alpha == 3);
  CHECK(a.counters().refused_size == 2);
  CHECK(a.counters().refused_sender == 1);
  CHECK(a.counters().served == 0);
  CHECK(net.end(0).counters()[wire::DropReason::non_finite] == 2);
  CHECK_FALSE(p1.receive(Clock::now() + 10ms));  // refused requests get no reply
  CHECK(a.exchanges().drain().empty());
  // Counted where the metrics see them (exchanges_refused), the 2 non-finite ones by the transport.
  CHECK(a.exchanges().totals().failed == 6);

  // Replies: a asks both p1 and p2 (fanout 2, alpha 1/3) from its snapshot of 1.0.
  auto round = std::async(std::launch::async, [&] { return a.mix(x, 0); });
  const auto soon = [] { return Clock::now() + 30s; };
  auto request1 = p1.receive(soon());
  auto request2 = p2.receive(soon());
  REQUIRE(request1);
  REQUIRE(request2);
  for (const auto* request : {&*request1, &*request2}) {
    CHECK(request->type() == MessageType::params_push);
    CHECK(request->header().weight == Approx(1.0 / 3.0).epsilon(1e-15));
    CHECK(request->count() == kSize);
    CHECK(request->header().step == 0);
    CHECK(request->decode() == x0);
  }
  const auto reply = [](transport::Transport& from, std::uint64_t nonce, std::size_t count, float value) {
    wire::Header h;
    h.type = MessageType::params_reply;
    h.nonce = nonce;
    from.send("p0", h, Payload::copy_f32(std::vector<float>(count, value)));
  };
  const std::uint64_t nonce1 = request1->header().nonce, nonce2 = request2->header().nonce;
  REQUIRE(nonce1 != nonce2);
  reply(p1, nonce1, kSize - 1, 4.0f);       // wrong size: refused, the request stays open
  reply(p1, nonce1 ^ 0x5555, kSize, 4.0f);  // a nonce nobody sent
  reply(p2, nonce1, kSize, 4.0f);           // p1's nonce from p2
  reply(p1, nonce1, kSize, 4.0f);
  reply(p2, nonce2, kSize, 7.0f);
  const RoundResult result = round.get();
  CHECK(result.exchanged == 2);
  CHECK(result.timed_out == 0);
  CHECK(a.counters().refused_size == 3);
  CHECK(a.counters().unmatched_replies == 2);
  CHECK(a.counters().applied == 2);
  // 1 + (4 - 1)/3 + (7 - 1)/3 = 4: the average of 1, 4 and 7, up to the float rounding
  // of each update (2^-24 relative).
  for (const float v : x) REQUIRE(v == Approx(4.0).epsilon(1e-6));
}

TEST_CASE("every exchange is logged on both sides with partner, bytes and distance", "[pairwise]") {
  logging::CapturedLines quiet(logging::Level::off);
  const double root_n = std::sqrt(static_cast<double>(kSize));

  SECTION("adpsgd: one active and one passive peer average exactly") {
    Network net(2);
    AdPsgd active(net.end(0), net.peers(0), options_with(2s));
    AdPsgd passive(net.end(1), net.peers(1), options_with(2s));
    REQUIRE(active.active());
    REQUIRE_FALSE(passive.active());
    CHECK(active.candidates() == std::vector<int>{1});
    std::vector<float> x0(kSize, 1.0f), x1(kSize, 3.0f);
    auto served = std::async(std::launch::async, [&] { return passive.mix(x1, 0); });
    const RoundResult r0 = active.mix(x0, 0);
    const RoundResult r1 = served.get();
    CHECK(r0.exchanged == 1);
    CHECK(r1.exchanged == 1);
    // 1 + (3 - 1)/2 and 3 + (1 - 3)/2: exact in float.
    CHECK(x0 == std::vector<float>(kSize, 2.0f));
    CHECK(x1 == std::vector<float>(kSize, 2.0f));
    const auto mine = active.exchanges().drain();
    const auto theirs = passive.exchanges().drain();
    REQUIRE(mine.size() == 1);
    REQUIRE(theirs.size() == 1);
    CHECK(mine[0].partner == "p1");
    CHECK(theirs[0].partner == "p0");
    for (const auto& rec : {mine[0], theirs[0]}) {
      CHECK(rec.outcome == ExchangeRecord::Outcome::ok);
      CHECK(rec.round == 0);
      CHECK(rec.bytes_sent == kSize * sizeof(float));
      CHECK(rec.bytes_received == kSize * sizeof(float));
      CHECK(rec.distance == Approx(2.0 * root_n).epsilon(1e-12));
    }
    CHECK(mine[0].latency_s > 0.0);  // measured from our request to the reply
    CHECK(mine[0].latency_s < 60.0);
    CHECK(theirs[0].latency_s == 0.0);  // the passive side waits for nothing
  }

  SECTION("gossip: fanout 2 reaches the average of three peers from one snapshot") {
    const Dtype dtype = GENERATE(Dtype::f32, Dtype::bf16);
    INFO("payload " << wire::to_string(dtype));
    const std::uint64_t bytes = *wire::payload_bytes(dtype, kSize);
    Network net(3);
    const auto o = options_with(2s, 2, dtype);
    Gossip g0(net.end(0), net.peers(0), o), g1(net.end(1), net.peers(1), o),
        g2(net.end(2), net.peers(2), o);
    // 0, 3 and 6 are exact in bf16 too, so the results are the same for both dtypes.
    std::vector<float> x0(kSize, 0.0f), x1(kSize, 3.0f), x2(kSize, 6.0f);
    std::atomic<bool> stop{false};
    const auto serve_until_stopped = [&](Gossip& g, std::vector<float>& x) {
      return std::async(std::launch::async, [&] {
        while (!stop) g.serve(x, Clock::now() + 2ms);
      });
    };
    auto s1 = serve_until_stopped(g1, x1);
    auto s2 = serve_until_stopped(g2, x2);
    const RoundResult r = g0.mix(x0, 0);
    stop = true;
    s1.get();
    s2.get();
    CHECK(r.exchanged == 2);
    // Partner halves: 3 + (0 - 3)/3 = 2 and 6 + (0 - 6)/3 = 4; ours: 0 + 3/3 + 6/3 = 3.
    // Float rounding of the 1/3 products allows 2^-24 relative.
    for (std::size_t i = 0; i < kSize; ++i) {
      REQUIRE(x0[i] == Approx(3.0).epsilon(1e-6));
      REQUIRE(x1[i] == Approx(2.0).epsilon(1e-6));
      REQUIRE(x2[i] == Approx(4.0).epsilon(1e-6));
    }
    auto mine = g0.exchanges().drain();
    REQUIRE(mine.size() == 2);
    std::sort(mine.begin(), mine.end(), [](const auto& a, const auto& b) { return a.partner < b.partner; });
    CHECK(mine[0].partner == "p1");
    CHECK(mine[1].partner == "p2");
    CHECK(mine[0].distance == Approx(3.0 * root_n).epsilon(1e-12));
    CHECK(mine[1].distance == Approx(6.0 * root_n).epsilon(1e-12));
    const auto theirs1 = g1.exchanges().drain(), theirs2 = g2.exchanges().drain();
    REQUIRE(theirs1.size() == 1);
    REQUIRE(theirs2.size() == 1);
    CHECK(theirs1[0].partner == "p0");
    CHECK(theirs2[0].partner == "p0");
    CHECK(theirs1[0].distance == Approx(3.0 * root_n).epsilon(1e-12));
    CHECK(theirs2[0].distance == Approx(6.0 * root_n).epsilon(1e-12));
    for (const auto& rec : {mine[0], mine[1], theirs1[0], theirs2[0]}) {
      CHECK(rec.outcome == ExchangeRecord::Outcome::ok);
      CHECK(rec.bytes_sent == bytes);
      CHECK(rec.bytes_received == bytes);
    }
  }

  SECTION("a partner that is gone is logged as failed, without waiting") {
    Network net(2);
    Gossip g(net.end(0), net.peers(0), options_with(30s));
    std::vector<float> x(kSize, 1.0f);
    net.fabric->kill("p1");
    const auto t0 = Clock::now();
    const RoundResult r = g.mix(x, 0);
    // Nowhere near the 30 s deadline: the transport said at once that p1 is gone.
    CHECK(Clock::now() - t0 < 10s);
    CHECK(r.failed == 1);
    CHECK(r.exchanged == 0);
    CHECK(x == std::vector<float>(kSize, 1.0f));
    const auto records = g.exchanges().drain();
    REQUIRE(records.size() == 1);
    CHECK(records[0].partner == "p1");
    CHECK(records[0].outcome == ExchangeRecord::Outcome::failed);
    CHECK_THAT(records[0].detail, Catch::Contains("'p1'"));
    CHECK(records[0].distance == -1.0);
  }
}
