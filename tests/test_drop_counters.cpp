// DropCounters under concurrent use, and DropLogger's rate limiting (driven by explicit
// time points, so no test waits on a clock).
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>
#include <vector>

#include "base/log.hpp"
#include "gossip/network/wire/drop_counters.hpp"

using namespace hearsay;
using namespace hearsay::wire;
using namespace std::chrono_literals;

TEST_CASE("DropCounters count exactly under concurrent recording", "[wire]") {
  DropCounters counters;
  constexpr int kThreads = 4;
  constexpr int kPerThread = 20000;
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&counters, t] {
        for (int i = 0; i < kPerThread; ++i) {
          if (i % 4 == 0)
            counters.record_accepted();
          else
            counters.record(static_cast<DropReason>((i + t) % kDropReasonCount));
        }
      });
  }
  const auto s = counters.snapshot();
  REQUIRE(s.accepted == kThreads * kPerThread / 4);
  REQUIRE(s.total_dropped() == kThreads * kPerThread * 3 / 4);
  REQUIRE(counters.total() == s.total_dropped());
  REQUIRE(counters.accepted() == s.accepted);
  std::uint64_t expected_bad_checksum = 0;
  for (int t = 0; t < kThreads; ++t)
    for (int i = 0; i < kPerThread; ++i)
      if (i % 4 != 0 && static_cast<std::size_t>((i + t) % kDropReasonCount) ==
                            static_cast<std::size_t>(DropReason::bad_checksum))
        ++expected_bad_checksum;
  REQUIRE(s[DropReason::bad_checksum] == expected_bad_checksum);
  REQUIRE(counters.count(DropReason::bad_checksum) == expected_bad_checksum);
  counters.record(DropReason::count_);  // not a reason: ignored
  REQUIRE(counters.total() == s.total_dropped());
}

TEST_CASE("DropLogger writes at most one line per reason per interval", "[wire]") {
  logging::CapturedLines captured(logging::Level::warn);
  DropLogger logger(1s);
  const auto t0 = DropLogger::Clock::time_point{} + 100s;

  logger.drop("peer3", DropReason::bad_checksum, "checksum 0x1 != 0x2", t0);
  for (int i = 1; i <= 36; ++i) logger.drop("peer3", DropReason::bad_checksum, {}, t0 + i * 20ms);
  // Another reason has its own budget.
  logger.drop("peer4", DropReason::wrong_run, "run 'x'", t0 + 10ms);
  REQUIRE(captured.lines().size() == 2);
  // The next drop after a full interval reports everything held back, itself included.
  logger.drop("peer3", DropReason::bad_checksum, {}, t0 + 1000ms);

  const auto lines = captured.lines();
  REQUIRE(lines.size() == 3);
  REQUIRE(lines[0].level == logging::Level::warn);
  REQUIRE(lines[0].message == "dropped a message from 'peer3' (bad_checksum): checksum 0x1 != 0x2");
  REQUIRE(lines[1].message == "dropped a message from 'peer4' (wrong_run): run 'x'");
  REQUIRE(lines[2].message == "dropped 37 messages from 'peer3' (bad_checksum) in the last 1.0 s");
}

TEST_CASE("DropLogger flush reports a burst that ended, naming mixed senders", "[wire]") {
  logging::CapturedLines captured(logging::Level::warn);
  DropLogger logger(500ms);
  const auto t0 = DropLogger::Clock::time_point{} + 10s;
  logger.drop("a", DropReason::non_finite, {}, t0);
  logger.drop("a", DropReason::non_finite, {}, t0 + 1ms);
  logger.drop("b", DropReason::non_finite, {}, t0 + 2ms);
  logger.drop("", DropReason::bad_msgpack, {}, t0 + 3ms);
  logger.flush(t0 + 100ms);  // interval not over: nothing yet
  REQUIRE(captured.lines().size() == 2);
  logger.flush(t0 + 600ms);
  auto lines = captured.lines();
  REQUIRE(lines.size() == 3);
  REQUIRE(lines[1].message == "dropped a message from an unidentified sender (bad_msgpack)");
  REQUIRE(lines[2].message == "dropped 2 messages from 'a' and other peers (non_finite) in the last 0.6 s");
  // Nothing pending: flush is silent; a forced flush with one pending drop reports it.
  logger.flush(t0 + 5s, true);
  REQUIRE(captured.lines().size() == 3);
  logger.drop("c", DropReason::non_finite, {}, t0 + 700ms);
  logger.flush(t0 + 800ms, true);
  lines = captured.lines();
  REQUIRE(lines.size() == 4);
  REQUIRE(lines[3].message == "dropped 1 message from 'c' (non_finite) in the last 0.2 s");
}
