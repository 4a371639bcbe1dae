// Ring all-reduce when peers fail: a killed peer at every ring position is named by every
// survivor within twice the round deadline, a peer that stops taking part is reported,
// inconsistent settings are refused; then exact sums over ZeroMQ.
#include "allreduce_test_util.hpp"

using namespace allreduce_test;

TEST_CASE("a killed peer is named by every survivor within twice the round deadline", "[allreduce]") {
  // notified: the survivors are connected to the victim, so the transport tells them at
  // once; silent: nobody connected to it, so only the round deadline and the probe find it.
  const bool notified = GENERATE(true, false);
  // before: it dies between rounds; during: it is killed while a large round runs.
  const bool during = GENERATE(false, true);
  INFO((notified ? "notified" : "silent") << " kill, " << (during ? "during" : "before") << " round 2");
  const int n = 5;
  const std::size_t size = during ? 300'000 : 1000;
  const auto timeout = 500ms;
  AlgorithmOptions options;
  options.round_timeout = timeout;
  logging::CapturedLines quiet(logging::Level::off);
  for (int victim = 0; victim < n; ++victim) {
    INFO("victim p" << victim);
    Ring ring = make_ring(n, options, 16 * 1024, notified ? -1 : victim);
    std::atomic<int> victim_round{-1};
    std::atomic<Clock::rep> kill_time{0};
    std::vector<Clock::time_point> thrown_at(n);
    std::vector<std::uint64_t> failed_round(n, 0);
    std::vector<Clock::duration> healthy_round(n);  // each peer's slowest round before the kill
    const auto kill = [&] {
      kill_time = Clock::now().time_since_epoch().count();
      ring.fabric->kill(peer_id(victim));
    };
    std::thread killer;
    if (during)
      killer = std::thread([&] {
        // Not a timing assumption: whenever the kill lands, the survivors must notice.
        const auto give_up = transport::testing::soon();
        while (victim_round.load() < 2 && Clock::now() < give_up) std::this_thread::yield();
        kill();
      });
    const auto errors = on_every_peer(n, [&](int r) {
      auto& algorithm = *ring.algorithms[static_cast<std::size_t>(r)];
      for (std::uint64_t round = 0; round < 10; ++round) {
        if (r == victim) {
          if (!during && round == 2) return kill();
          victim_round = static_cast<int>(round);
        }
        auto buffer = input(r, size, round);
        failed_round[static_cast<std::size_t>(r)] = round;
        const auto round_start = Clock::now();
        try {
          algorithm.sum(buffer, round);
          if (round < 2)
            healthy_round[static_cast<std::size_t>(r)] =
                std::max(healthy_round[static_cast<std::size_t>(r)], Clock::now() - round_start);
        } catch (...) {
          thrown_at[static_cast<std::size_t>(r)] = Clock::now();
          throw;
        }
      }
    });
    if (killer.joinable()) killer.join();
    const Clock::time_point killed_at{Clock::duration{kill_time.load()}};
    // The round deadline counts from a survivor's last progress, and after the kill the
    // survivors still pass on the chunks already under way, which takes at most what a
    // whole round takes on this machine: the slowest round before the kill, measured here
    // (milliseconds when idle; 300k floats through five threads take far longer when the
    // machine is busy). The guarantee is 2 x the deadline from that last progress.
    const Clock::duration slowest_round = *std::max_element(healthy_round.begin(), healthy_round.end());
    for (int r = 0; r < n; ++r) {
      if (r == victim) continue;
      INFO("survivor p" << r);
      REQUIRE(errors[static_cast<std::size_t>(r)]);
      try {
        std::rethrow_exception(errors[static_cast<std::size_t>(r)]);
      } catch (const PeerError& e) {
        INFO(e.what());
        CHECK(e.peer_id() == peer_id(victim));
        CHECK((e.failure() == PeerFailure::disconnected || e.failure() == PeerFailure::no_reply));
        CHECK_THAT(
            e.what(),
            Catch::Contains("all-reduce round " + std::to_string(failed_round[static_cast<std::size_t>(r)]) +
                            " cannot finish: peer " + peer_id(victim) + " is not answering"));
      } catch (const std::exception& e) {
        FAIL("not a PeerError: " << e.what());
      }
      // A correctness bound (the documented guarantee), not a speed target.
      const auto elapsed = thrown_at[static_cast<std::size_t>(r)] - killed_at;
      INFO("threw " << std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count()
                    << " ms after the kill; the slowest round before it took "
                    << std::chrono::duration_cast<std::chrono::milliseconds>(slowest_round).count() << " ms");
      CHECK(elapsed <= 2 * timeout + slowest_round);
      const auto records = ring.algorithms[static_cast<std::size_t>(r)]->exchanges().drain();
      REQUIRE(!records.empty());
      CHECK(records.back().outcome == ExchangeRecord::Outcome::failed);
      CHECK_THAT(records.back().detail, Catch::Contains(peer_id(victim)));
    }
  }
}

TEST_CASE("a peer that stops taking part without dying is reported within twice the deadline",
          "[allreduce]") {
  const int n = 4;
  const auto timeout = 300ms;
  AlgorithmOptions options;
  options.round_timeout = timeout;
  logging::CapturedLines quiet(logging::Level::off);
  for (int stalled = 0; stalled < n; ++stalled) {
    INFO("stalled peer p" << stalled);
    Ring ring = make_ring(n, options, 64);
    std::mutex mutex;
    std::condition_variable done_changed;
    int done = 0;
    std::atomic<Clock::rep> stalled_since{0};
    std::vector<Clock::time_point> thrown_at(n);
    std::vector<Clock::duration> healthy_round(n);  // each peer's round 0
    const auto errors = on_every_peer(n, [&](int r) {
      auto& algorithm = *ring.algorithms[static_cast<std::size_t>(r)];
      auto buffer = input(r, 500, 0);
      const auto round_start = Clock::now();
      algorithm.sum(buffer, 0);
      healthy_round[static_cast<std::size_t>(r)] = Clock::now() - round_start;
      if (r == stalled) {
        // Alive (its transport still answers pings) but no longer calling sum.
        stalled_since = Clock::now().time_since_epoch().count();
        std::unique_lock lock(mutex);
        done_changed.wait_until(lock, transport::testing::soon(), [&] { return done == n - 1; });
        return;
      }
      try {
        algorithm.sum(buffer, 1);
      } catch (...) {
        thrown_at[static_cast<std::size_t>(r)] = Clock::now();
        {
          std::lock_guard lock(mutex);
          ++done;
        }
        done_changed.notify_all();
        throw;
      }
    });
    const Clock::time_point since{Clock::duration{stalled_since.load()}};
    // As above: the deadline counts from a peer's last progress, which can come after the
    // stall began by up to a round's work on this machine (its round 0, measured here).
    const Clock::duration slowest_round = *std::max_element(healthy_round.begin(), healthy_round.end());
    for (int r = 0; r < n; ++r) {
      if (r == stalled) continue;
      INFO("peer p" << r);
      REQUIRE(errors[static_cast<std::size_t>(r)]);
      try {
        std::rethrow_exception(errors[static_cast<std::size_t>(r)]);
      } catch (const PeerError& e) {
        INFO(e.what());
        CHECK(e.failure() == PeerFailure::no_reply);
        // Pings cannot tell who stalled; each peer names the predecessor it waited on,
        // which for the stalled peer's successor is the stalled peer itself.
        CHECK(e.peer_id() == peer_id((r + n - 1) % n));
        CHECK_THAT(e.what(), Catch::Contains("all-reduce round 1 cannot finish") &&
                                 Catch::Contains("every peer answers pings"));
      } catch (const std::exception& e) {
        FAIL("not a PeerError: " << e.what());
      }
      INFO("round 0 took up to "
           << std::chrono::duration_cast<std::chrono::milliseconds>(slowest_round).count() << " ms");
      CHECK(thrown_at[static_cast<std::size_t>(r)] - since <= 2 * timeout + slowest_round);
    }
  }
}

TEST_CASE("allreduce refuses inconsistent peer sets, zero-element chunks and rounds that do not increase",
          "[allreduce]") {
  Ring ring = make_ring(1);
  auto& transport = *ring.transports[0];
  CHECK_THROWS_AS(RingAllReduce(transport, PeerSet{}, {}), std::invalid_argument);
  CHECK_THROWS_WITH(RingAllReduce(transport, peer_set(2, 2), {}), Catch::Contains("outside 0..1"));
  CHECK_THROWS_WITH(RingAllReduce(transport, peer_set(2, 1), {}),
                    Catch::Contains("but the transport is 'p0'"));
  PeerSet twice{{"p0", "p0"}, 0};
  CHECK_THROWS_WITH(RingAllReduce(transport, twice, {}), Catch::Contains("unique"));
  CHECK_THROWS_WITH(RingAllReduce(transport, peer_set(1, 0), {}, 0), Catch::Contains("chunk_elements"));
  AlgorithmOptions none;
  none.compress = wire::Dtype::none;
  CHECK_THROWS_WITH(RingAllReduce(transport, peer_set(1, 0), none), Catch::Contains("compress"));

  RingAllReduce& alone = *ring.algorithms[0];
  CHECK(alone.name() == "allreduce");
  std::vector<float> buffer{1, 2, 3};
  alone.sum(buffer, 3);  // one peer: the sum of one buffer, nothing sent
  CHECK(buffer == std::vector<float>{1, 2, 3});
  CHECK_THROWS_WITH(alone.sum(buffer, 3), Catch::Contains("rounds must increase"));
  CHECK_THROWS_WITH(alone.sum(buffer, 2), Catch::Contains("rounds must increase"));
  CHECK(alone.mix(buffer, 4).exchanged == 0);
  CHECK(buffer == std::vector<float>{1, 2, 3});
}

TEST_CASE("a transport not connected to its successor is an error naming the successor", "[allreduce]") {
  auto fabric = InprocFabric::create();
  transport::InprocTransport p0(fabric, transport::testing::inproc_options("p0")),
      p1(fabric, transport::testing::inproc_options("p1"));
  RingAllReduce algorithm(p0, peer_set(2, 0), {});
  std::vector<float> buffer(10, 1.0f);
  try {
    algorithm.sum(buffer, 0);
    FAIL("sum went through without a connection");
  } catch (const PeerError& e) {
    CHECK(e.peer_id() == "p1");
    CHECK(e.failure() == PeerFailure::unknown_peer);
    CHECK_THAT(e.what(), Catch::Contains("connect the transport to every peer"));
  }
}

TEST_CASE("ring all-reduce over ZeroMQ tcp sums 10^6 elements exactly", "[allreduce]") {
  using transport::testing::Kind;
  logging::CapturedLines quiet(logging::Level::off);  // the insecure-mode warnings
  const int n = 4;
  const std::size_t size = 1'000'000;
  std::vector<std::unique_ptr<transport::Transport>> transports;
  for (int r = 0; r < n; ++r)
    transports.push_back(
        std::make_unique<transport::ZmqTransport>(transport::testing::zmq_options(peer_id(r), Kind::tcp)));
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b)
      if (a != b) transports[a]->connect(peer_id(b), transports[b]->address());
  AlgorithmOptions options;
  options.round_timeout = 10s;  // generous: only a hang should reach it
  std::vector<std::unique_ptr<RingAllReduce>> algorithms;
  for (int r = 0; r < n; ++r)
    algorithms.push_back(std::make_unique<RingAllReduce>(*transports[r], peer_set(n, r), options));
  constexpr std::uint64_t kRounds = 3;
  std::vector<std::vector<std::vector<float>>> results(n);
  require_no_errors(on_every_peer(n, [&](int r) {
    for (std::uint64_t round = 0; round < kRounds; ++round) {
      auto buffer = input(r, size, round);
      algorithms[static_cast<std::size_t>(r)]->sum(buffer, round);
      results[static_cast<std::size_t>(r)].push_back(std::move(buffer));
    }
  }));
  for (std::uint64_t round = 0; round < kRounds; ++round) {
    const auto want = expected_sum(n, size, round);
    for (int r = 0; r < n; ++r) {
      INFO("peer " << r << ", round " << round);
      require_equal(want, results[static_cast<std::size_t>(r)][round]);
    }
  }
  for (int r = 0; r < n; ++r) CHECK(transports[r]->counters().total_dropped() == 0);
}
