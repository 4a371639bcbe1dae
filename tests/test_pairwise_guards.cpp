// What a pairwise exchange does not take from a partner, and what it does not wait for:
// finite garbage (or a model that blew up) is refused and counted; an AD-PSGD passive peer
// that already answered a request trains on.
#include <algorithm>
#include <catch2/catch.hpp>
#include <future>
#include <string>
#include <vector>

#include "base/log.hpp"
#include "gossip/mixing/algorithms/adpsgd.hpp"
#include "gossip/mixing/algorithms/gossip.hpp"
#include "pairwise_test_util.hpp"

using namespace hearsay;
using namespace hearsay::algorithms;
using namespace hearsay::algorithms::pairwise_testing;
using namespace std::chrono_literals;
using transport::Payload;
using wire::MessageType;

TEST_CASE("a partner's finite garbage is refused and counted, and the buffer stays a model", "[pairwise]") {
  // Values of 1e30 are finite and pass the transport's checks: averaged in, one partner's
  // push ended the peer ("the loss became nan").
  logging::CapturedLines quiet(logging::Level::off);
  Network net(3);
  auto& p1 = net.end(1);
  auto& p2 = net.end(2);
  Gossip a(net.end(0), net.peers(0), options_with(2s, 1));
  std::vector<float> x(kSize, 1.0f);
  const auto x0 = x;
  const auto push = [](transport::Transport& from, float value) {
    wire::Header h;
    h.type = MessageType::params_push;
    h.weight = 0.5;
    h.nonce = 91;
    from.send("p0", h, Payload::copy_f32(std::vector<float>(kSize, value)));
  };
  push(p1, 1e30f);
  a.serve(x, Clock::now() + 50ms);
  CHECK(x == x0);
  CHECK(a.counters().refused_implausible == 1);
  CHECK(a.counters().served == 0);
  // The requester gets a reply without values: it applies nothing either.
  auto refusal = p1.receive(Clock::now() + 5s);
  REQUIRE(refusal);
  CHECK(refusal->type() == MessageType::params_reply);
  CHECK(refusal->count() == 0);
  const auto logged = a.exchanges().drain();
  REQUIRE(logged.size() == 1);
  CHECK(logged[0].outcome == ExchangeRecord::Outcome::implausible);
  CHECK(a.exchanges().totals().implausible == 1);
  CHECK(a.exchanges().totals().failed == 0);  // counted once, as implausible

  // A partner trained further (values 50 times ours) is a model like ours: served.
  push(p2, 50.0f);
  a.serve(x, Clock::now() + 50ms);
  CHECK(a.counters().served == 1);
  for (const float v : x) REQUIRE(v == Approx(25.5));

  // A reply of garbage to our own request is not applied.
  const auto before = x;
  auto round = std::async(std::launch::async, [&] { return a.mix(x, 0); });
  transport::Transport* asked = nullptr;
  std::optional<transport::Message> request;
  for (int i = 0; i < 200 && !request; ++i)
    for (auto* end : {&p1, &p2}) {
      if (request) break;
      auto m = end->receive(Clock::now() + 10ms);  // p2 also holds the reply to its push
      if (m && m->type() == MessageType::params_push) {
        request = std::move(m);
        asked = end;
      }
    }
  REQUIRE(request);
  wire::Header h;
  h.type = MessageType::params_reply;
  h.nonce = request->header().nonce;
  asked->send("p0", h, Payload::copy_f32(std::vector<float>(kSize, -1e30f)));
  round.get();
  CHECK(x == before);
  CHECK(a.counters().refused_implausible == 2);
  CHECK(a.counters().applied == 0);
}

TEST_CASE("an adpsgd passive peer that served between its rounds trains on without waiting", "[pairwise]") {
  // AD-PSGD's workers all train continuously. Passive peers waited in every round for one
  // more request: 25% slower than the active ones with the wait bounded by half a step's
  // compute, 50-70x before that.
  logging::CapturedLines quiet(logging::Level::off);
  // In virtual time, a round lasts exactly what the algorithm decided to wait.
  in_virtual_time([] {
    Network net(2);
    AdPsgd active(net.end(0), net.peers(0), options_with(2s));
    AdPsgd passive(net.end(1), net.peers(1), options_with(2s));
    std::vector<float> x0(kSize, 1.0f), x1(kSize, 3.0f);
    // The active peer's request is answered by the passive peer's serve(), between rounds.
    int exchanged = -1;
    {
      fiber::Worker asking("active", [&] { exchanged = active.mix(x0, 0).exchanged; });
      for (const auto give_up = Clock::now() + 10s; passive.counters().served == 0 && Clock::now() < give_up;)
        passive.serve(x1, Clock::now() + 20ms);
    }
    CHECK(exchanged == 1);
    CHECK(passive.counters().served == 1);
    // Its next round has nothing to wait for: it served since its last one. (Without a
    // known compute, the wait for a request would be the 2 s round timeout.)
    const auto start = Clock::now();
    passive.mix(x1, 0);
    CHECK(Clock::now() - start == 0s);
    // The round after that served nothing since: it waits for a request, as a passive peer
    // whose partners are slower must not run ahead of them (here until the round timeout).
    const auto again = Clock::now();
    passive.mix(x1, 1);
    CHECK(Clock::now() - again == 2s);
  });
}
