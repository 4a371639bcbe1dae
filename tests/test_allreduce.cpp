// Ring all-reduce: exact sums for 1..16 peers at sizes 0, 1, 7, 1000 and 10^6 over the
// in-process fabric (one thread per peer), any chunk size, consecutive rounds and the
// exchange log, the average, compressed chunks, refused chunks, and failures: a killed
// peer at every ring position is named by every survivor within twice the round
// deadline, and a peer that stops taking part is reported. Then exact sums over ZeroMQ.
//
// Inputs are integer-valued floats of magnitude at most 1000, so every partial sum of up
// to 16 of them is an integer far below 2^24: exact in f32 in any summation order, and
// the expected sums can be compared bit for bit.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "base/log.hpp"
#include "base/rng.hpp"
#include "gossip/mixing/algorithms/allreduce.hpp"
#include "gossip/network/transport/inproc_transport.hpp"
#include "gossip/network/transport/zmq_transport.hpp"
#include "transport_test_util.hpp"

using namespace hearsay;
using namespace std::chrono_literals;
using algorithms::AlgorithmOptions;
using algorithms::ExchangeRecord;
using algorithms::PeerSet;
using algorithms::RingAllReduce;
using transport::Clock;
using transport::InprocFabric;
using transport::PeerError;
using transport::PeerFailure;

namespace {

std::string peer_id(int rank) { return "p" + std::to_string(rank); }

// An integer in [-1000, 1000] that differs between peers, elements and rounds.
float value_of(int rank, std::size_t i, std::uint64_t round) {
  const std::uint64_t h = (i * 7919 + static_cast<std::uint64_t>(rank) * 104729 + round * 15485863) % 2001;
  return static_cast<float>(static_cast<int>(h) - 1000);
}

std::vector<float> input(int rank, std::size_t size, std::uint64_t round) {
  std::vector<float> v(size);
  for (std::size_t i = 0; i < size; ++i) v[i] = value_of(rank, i, round);
  return v;
}

// Summed in 64-bit integers, independently of any float arithmetic.
std::vector<float> expected_sum(int n, std::size_t size, std::uint64_t round) {
  std::vector<float> s(size);
  for (std::size_t i = 0; i < size; ++i) {
    std::int64_t total = 0;
    for (int r = 0; r < n; ++r) total += static_cast<std::int64_t>(value_of(r, i, round));
    s[i] = static_cast<float>(total);
  }
  return s;
}

// The first index where got differs from want, or want.size() when they are equal.
std::size_t first_difference(const std::vector<float>& want, std::span<const float> got) {
  if (got.size() != want.size()) return 0;
  for (std::size_t i = 0; i < want.size(); ++i)
    if (got[i] != want[i]) return i;
  return want.size();
}

void require_equal(const std::vector<float>& want, const std::vector<float>& got) {
  const std::size_t at = first_difference(want, got);
  INFO("first difference at " << at << ": expected " << (at < want.size() ? want[at] : 0.0f) << ", got "
                              << (at < got.size() ? got[at] : 0.0f) << " (sizes " << want.size() << ", "
                              << got.size() << ")");
  REQUIRE(at == want.size());
}

struct Ring {
  std::shared_ptr<InprocFabric> fabric = InprocFabric::create();
  std::vector<std::unique_ptr<transport::Transport>> transports;
  std::vector<std::unique_ptr<RingAllReduce>> algorithms;
};

PeerSet peer_set(int n, int self) {
  PeerSet peers;
  for (int r = 0; r < n; ++r) peers.ids.push_back(peer_id(r));
  peers.self = self;
  return peers;
}

// n in-process peers p0..p(n-1). Every peer connects to every other, except that with
// a `silent` rank nobody connects to that one: it connects to everyone and pings them,
// so they can still send to it, but a kill of it reaches nobody as a PeerError and must
// be found by the round deadline and the probe.
Ring make_ring(int n, AlgorithmOptions options = {},
               std::size_t chunk_elements = RingAllReduce::kDefaultChunkElements, int silent = -1) {
  Ring ring;
  for (int r = 0; r < n; ++r)
    ring.transports.push_back(std::make_unique<transport::InprocTransport>(
        ring.fabric, transport::testing::inproc_options(peer_id(r))));
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b)
      if (a != b && b != silent)
        ring.transports[a]->connect(peer_id(b), InprocFabric::address_for(peer_id(b)));
  if (silent >= 0)
    for (int b = 0; b < n; ++b)
      if (b != silent) (void)ring.transports[silent]->ping(peer_id(b), transport::testing::soon());
  for (int r = 0; r < n; ++r)
    ring.algorithms.push_back(
        std::make_unique<RingAllReduce>(*ring.transports[r], peer_set(n, r), options, chunk_elements));
  return ring;
}

// Runs body(rank) on one thread per peer and returns what each threw (null: nothing).
// Catch2 assertions are not thread-safe, so bodies only record and the caller checks.
std::vector<std::exception_ptr> on_every_peer(int n, const std::function<void(int)>& body) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

void require_no_errors(const std::vector<std::exception_ptr>& errors) {
  for (std::size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r]) continue;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const std::exception& e) {
      FAIL("peer " << r << " threw: " << e.what());
    }
  }
}

// Elements in segment i of a buffer of `size` split over n peers (as documented in
// allreduce.hpp: the first size mod n segments are one longer).
std::size_t segment_length(std::size_t size, int n, int i) {
  const auto un = static_cast<std::size_t>(n);
  const auto ui = static_cast<std::size_t>(((i % n) + n) % n);
  return size / un + (ui < size % un ? 1 : 0);
}

}  // namespace

TEST_CASE("ring all-reduce sums exactly for 1 to 16 peers at sizes 0, 1, 7, 1000 and 10^6", "[allreduce]") {
  for (std::size_t size :
       {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{1'000'000}}) {
    for (int n = 1; n <= 16; ++n) {
      INFO(n << " peers, " << size << " elements");
      Ring ring = make_ring(n);
      std::vector<std::vector<float>> buffers(static_cast<std::size_t>(n));
      require_no_errors(on_every_peer(n, [&](int r) {
        auto& buffer = buffers[static_cast<std::size_t>(r)];
        buffer = input(r, size, 0);
        ring.algorithms[static_cast<std::size_t>(r)]->sum(buffer, 0);
      }));
      const auto want = expected_sum(n, size, 0);
      for (int r = 0; r < n; ++r) {
        INFO("peer " << r);
        require_equal(want, buffers[static_cast<std::size_t>(r)]);
      }
    }
  }
}

TEST_CASE("any chunk size over consecutive rounds, with one exchange record per round", "[allreduce]") {
  constexpr std::uint64_t kRounds = 3;
  for (std::size_t chunk :
       {std::size_t{1}, std::size_t{3}, std::size_t{64}, RingAllReduce::kDefaultChunkElements}) {
    for (int n : {2, 3, 5, 8}) {
      for (std::size_t size : {std::size_t{7}, std::size_t{1000}}) {
        INFO(n << " peers, " << size << " elements, chunks of " << chunk);
        Ring ring = make_ring(n, {}, chunk);
        std::vector<std::vector<std::vector<float>>> results(static_cast<std::size_t>(n));
        require_no_errors(on_every_peer(n, [&](int r) {
          for (std::uint64_t round = 0; round < kRounds; ++round) {
            auto buffer = input(r, size, round);
            ring.algorithms[static_cast<std::size_t>(r)]->sum(buffer, round);
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
        for (int r = 0; r < n; ++r) {
          INFO("peer " << r);
          const auto records = ring.algorithms[static_cast<std::size_t>(r)]->exchanges().drain();
          REQUIRE(records.size() == kRounds);
          // Each peer sends every segment but r+1 (reduce-scatter) and every segment but
          // r+2 (all-gather), and receives every segment but r and then every but r+1.
          const std::uint64_t sent =
              4 * (2 * size - segment_length(size, n, r + 1) - segment_length(size, n, r + 2));
          const std::uint64_t received =
              4 * (2 * size - segment_length(size, n, r) - segment_length(size, n, r + 1));
          for (std::uint64_t round = 0; round < kRounds; ++round) {
            const ExchangeRecord& record = records[round];
            CHECK(record.round == round);
            CHECK(record.partner == peer_id((r + 1) % n));
            CHECK(record.outcome == ExchangeRecord::Outcome::ok);
            CHECK(record.bytes_sent == sent);
            CHECK(record.bytes_received == received);
            // Measured, not left at its default of 0, and not from a start never set (an
            // uninitialised time point would give decades).
            CHECK(record.latency_s > 0);
            CHECK(record.latency_s < 60);
            CHECK(record.distance == -1);
          }
        }
      }
    }
  }
}

TEST_CASE("mix leaves the average on every peer, the same bits everywhere", "[allreduce]") {
  const std::size_t size = 1001;
  for (int n : {1, 2, 3, 6, 16}) {
    INFO(n << " peers");
    Ring ring = make_ring(n, {}, 100);
    std::vector<std::vector<float>> buffers(static_cast<std::size_t>(n));
    std::vector<algorithms::RoundResult> results(static_cast<std::size_t>(n));
    require_no_errors(on_every_peer(n, [&](int r) {
      auto& buffer = buffers[static_cast<std::size_t>(r)];
      buffer = input(r, size, 4);
      results[static_cast<std::size_t>(r)] = ring.algorithms[static_cast<std::size_t>(r)]->mix(buffer, 4);
    }));
    // The exact sum divided once, correctly rounded, is what every peer must hold.
    auto want = expected_sum(n, size, 4);
    for (float& x : want) x /= static_cast<float>(n);
    for (int r = 0; r < n; ++r) {
      INFO("peer " << r);
      require_equal(want, buffers[static_cast<std::size_t>(r)]);
      CHECK(results[static_cast<std::size_t>(r)].exchanged == n - 1);
    }
  }
}

TEST_CASE("compressed chunks: f16 sums small integers exactly, int8 stays within its rounding",
          "[allreduce]") {
  SECTION("f16: partial sums of 8 integers in [-64, 64] are integers below 2048, exact in f16") {
    const int n = 8;
    const std::size_t size = 1000;
    AlgorithmOptions options;
    options.compress = wire::Dtype::f16;
    Ring ring = make_ring(n, options, 50);
    auto small = [](int r, std::size_t i) {
      return static_cast<float>(static_cast<int>((i * 31 + r * 7) % 129) - 64);
    };
    std::vector<std::vector<float>> buffers(n);
    require_no_errors(on_every_peer(n, [&](int r) {
      auto& buffer = buffers[static_cast<std::size_t>(r)];
      buffer.resize(size);
      for (std::size_t i = 0; i < size; ++i) buffer[i] = small(r, i);
      ring.algorithms[static_cast<std::size_t>(r)]->sum(buffer, 0);
    }));
    std::vector<float> want(size, 0.0f);
    for (std::size_t i = 0; i < size; ++i)
      for (int r = 0; r < n; ++r) want[i] += small(r, i);
    for (int r = 0; r < n; ++r) require_equal(want, buffers[static_cast<std::size_t>(r)]);
    // Two bytes per element on the wire (see the byte counts of the f32 test above).
    CHECK(ring.algorithms[0]->exchanges().totals().bytes_sent ==
          2 * (2 * size - segment_length(size, n, 1) - segment_length(size, n, 2)));
  }
  SECTION("int8: not exact, but identical on every peer and within n roundings of scale/2") {
    const int n = 4;
    const std::size_t size = 5000;
    AlgorithmOptions options;
    options.compress = wire::Dtype::int8;
    Ring ring = make_ring(n, options, 1024);
    std::vector<std::vector<float>> inputs(n), buffers(n);
    Rng rng(11);
    for (auto& v : inputs) {
      v.resize(size);
      for (float& x : v) x = static_cast<float>(2 * rng.uniform() - 1);
    }
    require_no_errors(on_every_peer(n, [&](int r) {
      buffers[static_cast<std::size_t>(r)] = inputs[static_cast<std::size_t>(r)];
      ring.algorithms[static_cast<std::size_t>(r)]->sum(buffers[static_cast<std::size_t>(r)], 0);
    }));
    for (int r = 1; r < n; ++r) require_equal(buffers[0], buffers[static_cast<std::size_t>(r)]);
    // Each element is rounded n times: at each of the n-1 reduce-scatter sends and once
    // more when the owner keeps what it sends in the all-gather. A rounding moves it by
    // at most scale/2 = max|chunk|/254, and every partial sum of n values in [-1, 1]
    // is at most n in magnitude: at most n * n / 254 in all, plus float slack.
    const double bound = n * n / 254.0 + 1e-5;
    double worst = 0;
    for (std::size_t i = 0; i < size; ++i) {
      double exact = 0;
      for (int r = 0; r < n; ++r) exact += inputs[static_cast<std::size_t>(r)][i];
      worst = std::max(worst, std::abs(exact - buffers[0][i]));
    }
    INFO("largest error " << worst << ", bound " << bound);
    CHECK(worst <= bound);
    CHECK(worst > 0);  // the compression did happen
  }
}

TEST_CASE("a chunk outside the elements it must fill is refused, naming its sender", "[allreduce]") {
  // Two peers and 10 elements: p0 first receives segment 1 = [5, 10) from p1.
  Ring ring = make_ring(2);
  auto chunk_frames = [](std::uint64_t step, std::uint64_t offset, std::size_t count) {
    std::vector<float> values(count, 100.0f);
    wire::Header h = transport::testing::valid_header("p1", wire::MessageType::allreduce_chunk);
    h.step = step;
    h.offset = offset;
    h.dtype = wire::Dtype::f32;
    h.count = count;
    const auto payload = transport::testing::bytes_of(values);
    h.checksum = wire::checksum(payload);
    return std::vector<std::vector<std::uint8_t>>{wire::encode_header(h), payload};
  };
  std::vector<float> buffer(10, 1.0f);
  SECTION("running past the segment and the buffer") {
    ring.fabric->inject("p0", "p1", chunk_frames(0, 5, 8));
    REQUIRE_THROWS_WITH(
        ring.algorithms[0]->sum(buffer, 0),
        Catch::Contains("peer p1 sent elements [5, 13)") && Catch::Contains("elements from 5 up to 10"));
  }
  SECTION("starting far outside the buffer") {
    ring.fabric->inject("p0", "p1", chunk_frames(0, 1'000'000'000, 2));
    REQUIRE_THROWS_WITH(ring.algorithms[0]->sum(buffer, 0),
                        Catch::Contains("peer p1 sent elements [1000000000, 1000000002)"));
  }
  CHECK(buffer == std::vector<float>(10, 1.0f));  // nothing was written
  const auto records = ring.algorithms[0]->exchanges().drain();
  REQUIRE(records.size() == 1);
  CHECK(records[0].outcome == ExchangeRecord::Outcome::failed);
  CHECK_THAT(records[0].detail, Catch::Contains("p1"));
}

TEST_CASE("stale chunks and chunks from other peers than the predecessor are ignored", "[allreduce]") {
  const int n = 3;
  const std::size_t size = 30;
  Ring ring = make_ring(n, {}, 4);
  std::vector<std::vector<float>> buffers(n);
  const auto run_round = [&](std::uint64_t round) {
    require_no_errors(on_every_peer(n, [&](int r) {
      buffers[static_cast<std::size_t>(r)] = input(r, size, round);
      ring.algorithms[static_cast<std::size_t>(r)]->sum(buffers[static_cast<std::size_t>(r)], round);
    }));
    for (int r = 0; r < n; ++r)
      require_equal(expected_sum(n, size, round), buffers[static_cast<std::size_t>(r)]);
  };
  run_round(0);
  // For p0 (predecessor p2): a chunk of round 0 from p2, and one of round 1, ring step 0,
  // at the right offset but from p1. Both carry values that would spoil the sum.
  auto frames = [](const std::string& sender, std::uint64_t step, std::uint64_t offset) {
    const std::vector<float> values(4, 5000.0f);
    wire::Header h = transport::testing::valid_header(sender, wire::MessageType::allreduce_chunk);
    h.step = step;
    h.offset = offset;
    h.dtype = wire::Dtype::f32;
    h.count = values.size();
    const auto payload = transport::testing::bytes_of(values);
    h.checksum = wire::checksum(payload);
    return std::vector<std::vector<std::uint8_t>>{wire::encode_header(h), payload};
  };
  ring.fabric->inject("p0", "p2", frames("p2", 0, 20));
  ring.fabric->inject("p0", "p1", frames("p1", 1 * 2 * n, 20));
  run_round(1);
  run_round(2);
}

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
