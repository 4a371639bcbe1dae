// The virtual-time primitives (base/fiber.hpp): fibers run in virtual-time order, waits
// park them and deadlines fire in virtual time, compute() takes its modelled cost whatever
// the work really took, and the same program gives the same trace with 0, 1 or 3 compute
// threads.
#include <catch2/catch.hpp>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/fiber.hpp"

using namespace std::chrono_literals;
using hearsay::fiber::Clock;
using hearsay::fiber::ConditionVariable;
using hearsay::fiber::Scheduler;
using hearsay::fiber::Worker;

namespace {
double since(Scheduler& s, Clock::time_point t0) {
  return std::chrono::duration<double>(s.now() - t0).count();
}
}  // namespace

TEST_CASE("fibers run in virtual-time order and Clock::now() reads virtual time on them", "[fiber]") {
  Scheduler s;
  const auto t0 = s.now();
  std::vector<std::string> trace;
  for (int i = 0; i < 3; ++i)
    s.spawn("sleeper" + std::to_string(i), [&, i] {
      hearsay::fiber::sleep_until(Clock::now() + std::chrono::seconds(3 - i));
      trace.push_back(std::to_string(i) + "@" + std::to_string(since(s, t0)).substr(0, 3));
    });
  const auto wall = std::chrono::steady_clock::now();
  CHECK_FALSE(s.run());
  CHECK(std::chrono::steady_clock::now() - wall < 2s);  // three virtual seconds, no wall time
  CHECK(trace == std::vector<std::string>{"2@1.0", "1@2.0", "0@3.0"});
  CHECK(s.fibers() == 0);
  // Outside run(), the clock is the real one again (the virtual clock starts an hour on).
  CHECK(std::chrono::abs(Clock::now() - std::chrono::steady_clock::now()) < 1s);
}

TEST_CASE("a condition variable parks a fiber until notified, or until its virtual deadline", "[fiber]") {
  Scheduler s;
  const auto t0 = s.now();
  std::mutex m;
  ConditionVariable cv;
  bool ready = false;
  double woke_at = -1, timed_out_at = -1;
  bool timeout_result = true;
  s.spawn("waiter", [&] {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return ready; });
    woke_at = since(s, t0);
  });
  s.spawn("impatient", [&] {
    std::unique_lock lock(m);
    timeout_result = cv.wait_until(lock, Clock::now() + 500ms, [] { return false; });
    timed_out_at = since(s, t0);
  });
  s.spawn("notifier", [&] {
    hearsay::fiber::sleep_until(Clock::now() + 2s);
    {
      std::lock_guard lock(m);
      ready = true;
    }
    cv.notify_all();
  });
  s.run();
  CHECK(woke_at == Approx(2.0));
  CHECK(timed_out_at == Approx(0.5));
  CHECK_FALSE(timeout_result);
}

TEST_CASE("a stale notification does not wake a fiber from a later wait", "[fiber]") {
  // The waiter times out on cv (still listed there), then sleeps 10 s: a notify of cv
  // meanwhile must not cut the sleep short.
  Scheduler s;
  const auto t0 = s.now();
  std::mutex m;
  ConditionVariable cv;
  double slept_until = -1;
  s.spawn("waiter", [&] {
    {
      std::unique_lock lock(m);
      cv.wait_until(lock, Clock::now() + 1s);
    }
    hearsay::fiber::sleep_until(Clock::now() + 10s);
    slept_until = since(s, t0);
  });
  s.at(t0 + 3s, [&] { cv.notify_all(); });
  s.run();
  CHECK(slept_until == Approx(11.0));
}

TEST_CASE("a Worker made on a fiber is a fiber, and joining it waits in virtual time", "[fiber]") {
  Scheduler s;
  const auto t0 = s.now();
  double joined_at = -1;
  bool was_fiber = false;
  s.spawn("parent", [&] {
    Worker child("child", [&] { hearsay::fiber::sleep_until(Clock::now() + 4s); });
    was_fiber = child.is_fiber();
    child.join();
    joined_at = since(s, t0);
  });
  s.run();
  CHECK(was_fiber);
  CHECK(joined_at == Approx(4.0));
  // Off a scheduler it is a thread.
  bool ran = false;
  Worker thread("hs-test", [&] { ran = true; });
  CHECK_FALSE(thread.is_fiber());
  thread.join();
  CHECK(ran);
}

TEST_CASE("compute() costs its modelled time, runs the work, and the trace does not depend on threads",
          "[fiber]") {
  auto trace_with = [](int threads) {
    Scheduler s(Scheduler::Options{.compute_threads = threads});
    const auto t0 = s.now();
    std::vector<std::string> trace;
    std::vector<long> sums(4, 0);
    for (int i = 0; i < 4; ++i)
      s.spawn("peer" + std::to_string(i), [&, i] {
        for (int step = 0; step < 3; ++step) {
          s.compute(std::chrono::milliseconds(100 * (i + 1)), [&, i] {
            long acc = 0;
            for (long k = 0; k < 200000; ++k) acc += (k * (i + 1)) % 7;
            sums[static_cast<std::size_t>(i)] += acc;
          });
          trace.push_back(std::to_string(i) + "@" + std::to_string(since(s, t0)).substr(0, 4));
        }
      });
    s.run();
    trace.push_back(std::to_string(sums[0] + sums[1] + sums[2] + sums[3]));
    return trace;
  };
  const auto inline_trace = trace_with(0);
  CHECK(inline_trace.front() == "0@0.10");
  CHECK(std::find(inline_trace.begin(), inline_trace.end(), "3@1.20") != inline_trace.end());
  CHECK(trace_with(1) == inline_trace);
  CHECK(trace_with(3) == inline_trace);
}

TEST_CASE("an exception that leaves a fiber is kept with its name, and work's exceptions reach the fiber",
          "[fiber]") {
  Scheduler s;
  bool caught = false;
  s.spawn("thrower", [] { throw std::runtime_error("boom"); });
  s.spawn("computer", [&] {
    try {
      Scheduler::current()->compute(1ms, [] { throw std::invalid_argument("bad work"); });
    } catch (const std::invalid_argument&) {
      caught = true;
    }
  });
  s.run();
  CHECK(caught);
  REQUIRE(s.first_failure());
  CHECK_THROWS_WITH(std::rethrow_exception(s.first_failure()),
                    Catch::Contains("thrower") && Catch::Contains("boom"));
}

TEST_CASE("a fiber parked with nothing to wake it is reported as stuck", "[fiber]") {
  Scheduler s;
  std::mutex m;
  ConditionVariable cv;
  s.spawn("forgotten", [&] {
    std::unique_lock lock(m);
    cv.wait(lock);
  });
  CHECK_FALSE(s.run());
  CHECK(s.stuck() == std::vector<std::string>{"forgotten"});
}
