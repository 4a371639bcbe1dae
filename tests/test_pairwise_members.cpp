// Gossip over a peer set that changes (Gossip::set_peers, PairwiseExchange::set_peers):
// partners come from the new set from the next round on, a request to a peer that stays
// is kept (under its new rank) and its reply applied, one to a peer that left is given up.
#include <atomic>
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/log.hpp"
#include "gossip/mixing/algorithms/gossip.hpp"
#include "gossip/mixing/algorithms/partner_timing.hpp"
#include "pairwise_test_util.hpp"

using namespace hearsay;
using namespace hearsay::algorithms;
using namespace hearsay::algorithms::pairwise_testing;
using namespace std::chrono_literals;

namespace {

// Serves `algorithm`'s partners on its own thread until destroyed.
class Server {
 public:
  Server(Gossip& algorithm, std::vector<float>& buffer)
      : thread_([&algorithm, &buffer, this] {
          while (!done_) algorithm.serve(buffer, Clock::now() + 10ms);
        }) {}
  ~Server() {
    done_ = true;
    thread_.join();
  }

 private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

std::vector<std::string> partners_of(Gossip& g) {
  std::vector<std::string> out;
  for (const auto& r : g.exchanges().drain()) out.push_back(r.partner);
  return out;
}

}  // namespace

TEST_CASE("gossip draws its partners from the peer set it was last given", "[pairwise][membership]") {
  logging::CapturedLines quiet(logging::Level::off);
  Network net(3);
  const auto o = options_with(2s);
  Gossip g0(net.end(0), PeerSet{{"p0", "p1"}, 0}, o);
  Gossip g1(net.end(1), net.peers(1), o);
  Gossip g2(net.end(2), net.peers(2), o);
  auto buffers = random_buffers(3, kSize, 5);
  {
    Server s1(g1, buffers[1]);
    const RoundResult r = g0.mix(buffers[0], 0);
    CHECK(r.exchanged == 1);
  }
  CHECK(partners_of(g0) == std::vector<std::string>{"p1"});
  // p1 left, p2 came: p2 is the only partner now.
  g0.set_peers(PeerSet{{"p0", "p2"}, 0});
  CHECK(g0.peers().ids == std::vector<std::string>{"p0", "p2"});
  {
    Server s2(g2, buffers[2]);
    const RoundResult r = g0.mix(buffers[0], 1);
    CHECK(r.exchanged == 1);
  }
  CHECK(partners_of(g0) == std::vector<std::string>{"p2"});
  CHECK(g0.counters().refused_sender == 0);
}

TEST_CASE(
    "a request open across a change of the peer set: kept for a peer that stays, given up for one "
    "that left",
    "[pairwise][membership]") {
  logging::CapturedLines quiet(logging::Level::off);
  Network net(3);
  auto buffers = random_buffers(3, kSize, 7);
  Gossip g1(net.end(1), net.peers(1), options_with(200ms));
  // p2 knows replies to take about 1 s: its round waits 200 ms (the round timeout) for
  // one, and gives its request up only after 2 s (10 round timeouts), long after the
  // change below.
  auto o = options_with(200ms);
  o.partner_memory = std::make_shared<PartnerMemory>();
  for (int i = 0; i < 8; ++i) o.partner_memory->all.add(1s);
  const bool stays = GENERATE(true, false);
  INFO((stays ? "p1 stays" : "p1 leaves"));
  // p2 asks p1 (its only partner), which answers nothing yet: the request stays open.
  Gossip g2(net.end(2), PeerSet{{"p1", "p2"}, 1}, o);
  g2.mix(buffers[2], 0);
  REQUIRE(g2.outstanding() == 1);
  // p0 joins, sorting before p1, whose rank becomes 1 (it was 0); or p1 leaves.
  g2.set_peers(stays ? net.peers(2) : PeerSet{{"p0", "p2"}, 1});
  if (!stays) {
    CHECK(g2.outstanding() == 0);
    const auto records = g2.exchanges().drain();
    REQUIRE(records.size() == 1);
    CHECK(records[0].partner == "p1");
    CHECK(records[0].outcome == ExchangeRecord::Outcome::failed);
    CHECK_THAT(records[0].detail, Catch::Matchers::Contains("left the run's peer set"));
    return;
  }
  REQUIRE(g2.outstanding() == 1);
  // p1 answers now; p2 applies the reply to its request to p1 under p1's new rank.
  const auto until = Clock::now() + 5s;
  while (g1.counters().served == 0 && Clock::now() < until) g1.serve(buffers[1], Clock::now() + 10ms);
  while (g2.outstanding() > 0 && Clock::now() < until) g2.serve(buffers[2], Clock::now() + 10ms);
  CHECK(g2.outstanding() == 0);
  CHECK(g2.counters().applied == 1);
  CHECK(g2.counters().unmatched_replies == 0);
  const auto records = g2.exchanges().drain();
  REQUIRE(records.size() == 1);
  CHECK(records[0].partner == "p1");
  CHECK(records[0].outcome == ExchangeRecord::Outcome::ok);
}
