// Deadlines learnt from observed durations (gossip/mixing/algorithms/learnt_timeout.hpp) and the
// partner timing of pairwise exchanges built on them (partner_timing.hpp).
#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <set>

#include "base/log.hpp"
#include "gossip/mixing/algorithms/learnt_timeout.hpp"
#include "gossip/mixing/algorithms/partner_timing.hpp"

namespace hearsay::algorithms {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;

TEST_CASE("recent durations: nearest-rank quantiles of the last ones kept", "[timeout]") {
  RecentDurations recent(4);
  CHECK(recent.size() == 0);
  CHECK(recent.quantile(0.5) == LearntClock::duration::zero());
  for (int ms : {40, 10, 30, 20}) recent.add(milliseconds(ms));
  CHECK(recent.size() == 4);
  CHECK(recent.quantile(0.0) == 10ms);
  CHECK(recent.quantile(0.5) == 20ms);  // nearest rank: 2 of 4
  CHECK(recent.quantile(0.9) == 40ms);
  CHECK(recent.quantile(1.0) == 40ms);
  // The oldest (40) makes room: a link that became faster is followed.
  recent.add(5ms);
  CHECK(recent.size() == 4);
  CHECK(recent.quantile(1.0) == 30ms);
  CHECK(recent.quantile(0.0) == 5ms);
  // Negative durations (clocks read out of order) count as zero.
  recent.add(-3ms);
  CHECK(recent.quantile(0.0) == LearntClock::duration::zero());
  CHECK_THROWS_AS(RecentDurations(0), std::invalid_argument);
}

TEST_CASE("learnt timeouts: a multiple of a quantile, within floor and cap, the cap until enough is known",
          "[timeout]") {
  const TimeoutRule rule{0.9, 2.0, 10ms, 4};
  RecentDurations recent(32);
  for (int i = 0; i < 3; ++i) recent.add(30ms);
  CHECK(learnt_timeout(recent, rule, 2s) == 2s);  // 3 known: not enough
  recent.add(30ms);
  CHECK(learnt_timeout(recent, rule, 2s) == 60ms);
  CHECK(learnt_timeout(recent, rule, 50ms) == 50ms);  // capped
  RecentDurations fast(8);
  for (int i = 0; i < 8; ++i) fast.add(1ms);
  CHECK(learnt_timeout(fast, rule, 2s) == 10ms);  // floored
  CHECK(learnt_timeout(fast, rule, 5ms) == 5ms);  // a floor above the cap gives the cap

  // The compute bound: half the compute of a round, never below kAlwaysWait; nothing
  // when the compute is unknown.
  CHECK(within_compute(2s, LearntClock::duration::zero()) == 2s);
  CHECK(within_compute(2s, 100ms) == 50ms);
  CHECK(within_compute(30ms, 100ms) == 30ms);
  CHECK(within_compute(2s, 1ms) == kAlwaysWait);
  CHECK(within_compute(3ms, 1ms) == 3ms);

  // A round's wait: the learnt timeout, the cap until learnt, within the compute bound
  // (a lost message at the start of a run must not cost the round timeout).
  RecentDurations few(8);
  few.add(30ms);
  CHECK(learnt_wait(few, rule, 2s, 40ms) == 20ms);
  CHECK(learnt_wait(few, rule, 2s, LearntClock::duration::zero()) == 2s);  // nothing known at all
  CHECK(learnt_wait(recent, rule, 2s, 100ms) == 50ms);
  CHECK(learnt_wait(recent, rule, 2s, LearntClock::duration::zero()) == 60ms);
}

TEST_CASE(
    "partner timing: replies waited for a few typical round trips, requests given up after a partner's own",
    "[timeout]") {
  logging::CapturedLines quiet(logging::Level::off);
  const PeerSet peers{{"p0", "p1", "p2", "p3"}, 0};
  PartnerTiming timing(peers, 2s, "gossip");
  // Nothing known: the round timeout for both.
  CHECK(timing.reply_wait(LearntClock::duration::zero()) == 2s);
  CHECK(timing.expiry(1) == 2s);
  // p1 and p2 answer in 4 ms, p3 in 200 ms.
  for (int i = 0; i < 6; ++i) {
    timing.round_trip(1, 4ms);
    timing.round_trip(2, 4ms);
    timing.round_trip(3, 200ms);
  }
  CHECK(timing.reply_wait(LearntClock::duration::zero()) == 12ms);  // 3x the median, 4 ms
  CHECK(timing.reply_wait(10s) == 12ms);
  CHECK(timing.expiry(1) == 100ms);  // 4 x 4 ms is below the 100 ms floor
  CHECK(timing.expiry(3) == 800ms);  // p3's own: 4 x 200 ms
  // A partner not timed yet is taken to be like the others (which answer in 4 ms: the
  // floor).
  const PeerSet more{{"p0", "p1", "p2", "p3", "p4"}, 0};
  PartnerTiming t2(more, 2s, "gossip");
  for (int i = 0; i < 8; ++i) t2.round_trip(1, 4ms);
  CHECK(t2.expiry(4) == 100ms);

  SECTION("left out after a failure or an expiry, back when heard from") {
    const std::vector<int> all{1, 2, 3};
    CHECK(timing.live(all) == all);
    timing.leave_out_slow(3);
    CHECK(timing.live(all) == std::vector<int>{1, 2});
    timing.heard_from(3);
    CHECK(timing.live(all) == all);
    timing.leave_out_broken(2, "gone", false);
    CHECK(timing.live(all) == std::vector<int>{1, 3});
  }
  SECTION("a partner fifty times slower than the typical one is chosen about 25 times less often") {
    Rng rng(3);
    std::map<int, int> chosen;
    const int draws = 20000;
    for (int i = 0; i < draws; ++i) chosen[timing.choose({1, 2, 3}, 1, rng).at(0)] += 1;
    // Weights 1, 1 and 2 x 4 / 200 = 0.04: p3 gets 0.04 / 2.04 of the draws, about 2%.
    CHECK(chosen[1] == Approx(draws * 1 / 2.04).epsilon(0.05));
    CHECK(chosen[2] == Approx(draws * 1 / 2.04).epsilon(0.05));
    CHECK(chosen[3] == Approx(draws * 0.04 / 2.04).epsilon(0.25));
    // k distinct partners, never more than there are.
    const auto three = timing.choose({1, 2, 3}, 3, rng);
    CHECK(std::set<int>(three.begin(), three.end()) == std::set<int>{1, 2, 3});
    CHECK(timing.choose({1, 2}, 5, rng).size() == 2);
    CHECK(timing.choose({}, 1, rng).empty());
  }
}

TEST_CASE("partner choice: a slow partner is asked less often even where the others answer at once",
          "[timeout]") {
  // p1 and p2 answer in 0 (virtual time with no link emulated), p3 in 155 ms (a 100 Mbit/s
  // link). The typical round trip counts as 1 ms: p3's weight is 2 x 1 / 155. Before, a
  // typical round trip of 0 turned the rule off, and p3 got a third of the draws.
  const PeerSet peers{{"p0", "p1", "p2", "p3"}, 0};
  PartnerTiming timing(peers, 2s, "gossip");
  timing.floor_typical(PartnerTiming::kTypicalFloor);  // as gossip sets it
  for (int i = 0; i < 6; ++i) {
    timing.round_trip(1, 0ms);
    timing.round_trip(2, 0ms);
    timing.round_trip(3, 155ms);
  }
  Rng rng(5);
  std::map<int, int> chosen;
  const int draws = 20000;
  for (int i = 0; i < draws; ++i) chosen[timing.choose({1, 2, 3}, 1, rng).at(0)] += 1;
  const double w3 = 2.0 / 155.0;
  CHECK(chosen[1] == Approx(draws / (2 + w3)).epsilon(0.05));
  CHECK(chosen[3] == Approx(draws * w3 / (2 + w3)).epsilon(0.3));  // about 130 of 20,000
  // Without the floor (AD-PSGD, whose passive peers are mixed only when asked), as before.
  PartnerTiming unfloored(peers, 2s, "adpsgd");
  for (int i = 0; i < 6; ++i) {
    unfloored.round_trip(1, 0ms);
    unfloored.round_trip(3, 155ms);
  }
  std::map<int, int> plain;
  for (int i = 0; i < draws; ++i) plain[unfloored.choose({1, 2, 3}, 1, rng).at(0)] += 1;
  CHECK(plain[3] == Approx(draws / 3.0).epsilon(0.05));
}

TEST_CASE("partner timing: a first expiry an algorithm bounded, until round trips are learnt", "[timeout]") {
  // A passive AD-PSGD peer reaching out has timed nobody: its first requests expire after
  // the bound it gives (a few steps' compute), not the round timeout.
  const PeerSet peers{{"p0", "p1", "p2"}, 0};
  PartnerTiming timing(peers, 2s, "adpsgd");
  CHECK(timing.expiry(1) == 2s);
  timing.bound_first_expiry(200ms);
  CHECK(timing.expiry(1) == 200ms);
  timing.bound_first_expiry(5s);
  CHECK(timing.expiry(1) == 2s);  // never past the round timeout
  // Learnt: 4 x the 90th percentile of the partner's round trips, as without the bound.
  for (int i = 0; i < 4; ++i) timing.round_trip(1, 300ms);
  CHECK(timing.expiry(1) == 1200ms);
}

TEST_CASE("partner timing: a peer's next algorithm goes on from what its last one learnt, by peer id",
          "[timeout]") {
  logging::CapturedLines quiet(logging::Level::off);
  // Gossip starts a new algorithm when members come or go: ranks move with the peer set.
  auto memory = std::make_shared<PartnerMemory>();
  const PeerSet before{{"a", "b", "c", "d"}, 0};
  {
    PartnerTiming timing(before, 2s, "gossip", memory);
    for (int i = 0; i < 6; ++i) {
      timing.round_trip(1, 4ms);
      timing.round_trip(2, 40ms);
    }
    timing.leave_out_broken(3, "connection lost", false);  // d died
    CHECK(timing.live({1, 2, 3}) == std::vector<int>{1, 2});
  }
  const PeerSet after{{"a", "c", "d", "e"}, 0};  // b left, e joined
  PartnerTiming next(after, 2s, "gossip", memory);
  // Replies are not waited for a round timeout again, nor is the dead peer asked again.
  CHECK(next.reply_wait(LearntClock::duration::zero()) < 2s);
  CHECK(next.live({1, 2, 3}) == std::vector<int>{1, 3});
  CHECK(next.expiry(1) == 160ms);  // c's own round trips: 4 x 40 ms
  CHECK(next.expiry(3) == 160ms);  // e is not timed yet: like everyone, whose 90th percentile is 40 ms
  // Without a memory nothing carries over.
  PartnerTiming fresh(after, 2s, "gossip");
  CHECK(fresh.reply_wait(LearntClock::duration::zero()) == 2s);
  CHECK(fresh.live({1, 2, 3}) == std::vector<int>{1, 2, 3});
}

TEST_CASE("partner timing: a wait is lost on replies that miss it but come within the step", "[timeout]") {
  logging::CapturedLines quiet(logging::Level::off);
  const PeerSet peers{{"a", "b", "c", "d"}, 0};
  PartnerTiming timing(peers, 2s, "gossip");
  // Nothing known: every partner may answer in time.
  CHECK_FALSE(timing.wait_is_lost(1, 30ms, 60ms));
  for (int i = 0; i < 3; ++i) timing.round_trip(1, 40ms);
  CHECK_FALSE(timing.wait_is_lost(1, 30ms, 60ms));  // three round trips are not enough to tell
  timing.round_trip(1, 40ms);
  CHECK(timing.wait_is_lost(1, 30ms, 60ms));
  CHECK_FALSE(timing.wait_is_lost(1, 40ms, 60ms));  // the wait would see it come
  CHECK_FALSE(timing.wait_is_lost(1, 30ms, 35ms));  // slower than a step: the wait stretches it
  CHECK_FALSE(timing.wait_is_lost(1, 30ms, 0ms));   // the compute not known yet
  // Most replies late but a quarter in time: still worth the wait.
  for (int i = 0; i < 8; ++i) timing.round_trip(2, i < 2 ? 10ms : 50ms);
  CHECK_FALSE(timing.wait_is_lost(2, 30ms, 60ms));
  timing.round_trip(2, 50ms);  // 1 of 8 kept in time now
  CHECK(timing.wait_is_lost(2, 30ms, 60ms));
  // A quarter of the replies slower than the step: the wait still buys settled exchanges.
  for (int i = 0; i < 8; ++i) timing.round_trip(3, i < 3 ? 100ms : 40ms);
  CHECK_FALSE(timing.wait_is_lost(3, 30ms, 60ms));
}

}  // namespace
}  // namespace hearsay::algorithms
