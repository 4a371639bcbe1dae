// Pairwise exchanges behind one bad link (gossip/mixing/algorithms/pairwise.hpp): gossip and
// AD-PSGD peers, each with a Mixer as `hearsay peer` runs them, over the in-process fabric
// with one peer's link delayed and lossy; the consensus distance must stay bounded.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <exception>
#include <thread>
#include <vector>

#include "base/log.hpp"
#include "gossip/mixing/algorithms/mixer.hpp"
#include "pairwise_test_util.hpp"

using namespace hearsay;
using namespace hearsay::algorithms;
using namespace hearsay::algorithms::pairwise_testing;
using namespace std::chrono_literals;

TEST_CASE("one slow, lossy partner among fast ones: the consensus distance stays bounded for 1,000 rounds",
          "[pairwise][slow]") {
  // The failure this guards against: with one slow partner, exchanges overlapped and each
  // late delta re-added a share of the others (pairwise.hpp), so that 8 LeNet peers went
  // from a partner distance of 5 to 7e13 within 100 steps, one link of eight being slow.
  // Here p6's link delays every message to or from it by 50 ms and loses 20% of them.
  // Every peer runs as `hearsay peer` does: a Mixer (its communication thread serves
  // partners between rounds) and 1,000 local steps of 2 ms, each a small random change,
  // with a round after each.
  logging::CapturedLines quiet(logging::Level::off);
  const int n = 8, steps = 1000;
  const bool adpsgd = GENERATE(false, true);
  INFO((adpsgd ? "adpsgd" : "gossip"));
  Network net(n);
  net.fabric->set_link_trouble("p6", 50ms, 0.2, 17);
  std::vector<Member> members;
  std::vector<std::unique_ptr<Mixer>> mixers;
  for (int r = 0; r < n; ++r) {
    const auto o = options_with(500ms);
    members.push_back(adpsgd ? adpsgd_member(net, r, o, nullptr) : gossip_member(net, r, o));
    mixers.push_back(std::make_unique<Mixer>(std::move(members.back().algorithm), kSize));
  }
  auto buffers = random_buffers(n, kSize, 41);
  const auto ranks = all_ranks(n);
  const double dist0 = consensus_distance(buffers, ranks);
  std::vector<double> largest(static_cast<std::size_t>(n), 0.0);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      const auto i = static_cast<std::size_t>(r);
      Rng noise(1000 + static_cast<std::uint64_t>(r));
      try {
        for (int step = 1; step <= steps; ++step) {
          std::this_thread::sleep_for(2ms);  // the step's compute
          for (float& x : buffers[i]) x += static_cast<float>(0.01 * noise.normal());
          mixers[i]->after_step(buffers[i], static_cast<std::uint64_t>(step));
          for (const auto& record : mixers[i]->algorithm().exchanges().drain())
            largest[i] = std::max(largest[i], record.distance);
        }
        mixers[i]->flush(buffers[i]);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  for (int r = 0; r < n; ++r)
    for (const auto& record : mixers[static_cast<std::size_t>(r)]->algorithm().exchanges().drain())
      largest[static_cast<std::size_t>(r)] = std::max(largest[static_cast<std::size_t>(r)], record.distance);
  const PairwiseCounters total = total_counters(members);
  mixers.clear();  // the communication threads stop; the counters are final

  const double dist = consensus_distance(buffers, ranks);
  const double worst = *std::max_element(largest.begin(), largest.end());
  INFO("consensus distance " << dist0 << " -> " << dist << "; largest partner distance " << worst << "; "
                             << total.started << " requests, " << total.answered_busy << " answered busy, "
                             << total.applied << " replies applied, " << total.expired << " expired, "
                             << total.dropped_late << " dropped late, " << net.fabric->dropped_by_loss()
                             << " messages lost");
  REQUIRE(net.fabric->dropped_by_loss() > 0);  // the fault fired
  REQUIRE(total.applied > 1000);               // and the peers did mix
  // Random buffers start about sqrt(2 x 1000) = 45 apart; mixing never pushes two peers
  // further apart than that, and 1,000 rounds pull them well together against noise that
  // adds about 0.3 per step.
  CHECK(worst <= 2 * std::sqrt(2.0 * kSize));
  CHECK(std::isfinite(dist));
  CHECK(dist * 4 <= dist0);
}

TEST_CASE("a peer whose partners all left waits half a step's compute a round, not the round timeout",
          "[pairwise]") {
  // After a run with every link slow and lossy, an AD-PSGD peer that had learnt fewer
  // than four round trips was left behind by partners that had all finished: its rounds
  // waited the round timeout (2 s) each, as while nothing is known, and it trained at 16
  // samples/s for minutes.
  logging::CapturedLines quiet(logging::Level::off);
  const bool adpsgd = GENERATE(false, true);
  INFO((adpsgd ? "adpsgd" : "gossip"));
  // In virtual time, a round lasts exactly what the algorithm decided to wait.
  in_virtual_time([adpsgd] {
    Network net(2);
    const auto o = options_with(2s);
    Member member = adpsgd ? adpsgd_member(net, 0, o, nullptr) : gossip_member(net, 0, o);  // p0: active
    member.algorithm->set_compute_per_round(20ms);
    net.fabric->kill(net.ids[1]);
    std::vector<float> buffer(kSize, 1.0f);
    for (std::uint64_t round = 0; round < 6; ++round) {
      const auto start = Clock::now();
      member.algorithm->mix(buffer, round);
      INFO("round " << round);
      // Half the 20 ms compute, not the 2 s round timeout: whether it learnt of the death
      // in this round or an earlier one.
      CHECK(Clock::now() - start <= 10ms);
    }
  });
}
