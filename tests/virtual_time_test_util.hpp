// Virtual time for the tests (base/fiber.hpp): a barrier whose waits park fibers, and a
// runner of one test body as a fiber. A test that times an algorithm runs its peers as
// fibers: Clock reads virtual time, which only the algorithm's own waits move, so a round
// lasts exactly what the algorithm decided to wait, whatever the machine's load.
#pragma once
#include <catch2/catch.hpp>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/fiber.hpp"

namespace hearsay::testing {

// std::barrier, but one whose waits park a fiber instead of blocking the scheduler's
// thread; from threads it behaves as std::barrier with a completion function.
class FiberBarrier {
 public:
  explicit FiberBarrier(int count, std::function<void()> completion = {})
      : expected_(count), completion_(std::move(completion)) {}
  void arrive_and_wait() {
    std::unique_lock lock(mutex_);
    const std::uint64_t phase = phase_;
    if (++arrived_ == expected_) {
      next_phase();
      return;
    }
    changed_.wait(lock, [&] { return phase_ != phase; });
  }
  // Arrives in this phase and leaves the later ones.
  void arrive_and_drop() {
    std::unique_lock lock(mutex_);
    --expected_;
    if (expected_ > 0 && arrived_ == expected_) next_phase();
  }

 private:
  void next_phase() {
    arrived_ = 0;
    if (completion_) completion_();
    ++phase_;
    changed_.notify_all();
  }
  std::mutex mutex_;
  fiber::ConditionVariable changed_;
  int expected_, arrived_ = 0;
  std::uint64_t phase_ = 0;
  std::function<void()> completion_;
};

// Runs body(rank) for every rank, each on a thread of its own, or (virtual_time) each as a
// fiber named name(rank) of one fresh fiber::Scheduler, and returns once all ended. Returns
// the fibers left parked with nothing to wake them (none on threads). body must not throw.
inline std::vector<std::string> run_each(const std::vector<int>& ranks, bool virtual_time,
                                         const std::function<std::string(int)>& name,
                                         const std::function<void(int)>& body) {
  if (virtual_time) {
    fiber::Scheduler scheduler;
    for (const int rank : ranks) scheduler.spawn(name(rank), [&body, rank] { body(rank); });
    scheduler.run();
    return scheduler.stuck();
  }
  std::vector<std::thread> threads;
  for (const int rank : ranks) threads.emplace_back([&body, rank] { body(rank); });
  for (auto& t : threads) t.join();
  return {};
}

// Runs body as the one fiber of a fresh fiber::Scheduler and returns once it ended,
// rethrowing what left it (a failed REQUIRE too). Build the network and the algorithms
// inside, so that every time they keep is virtual.
inline void in_virtual_time(const std::function<void()>& body) {
  fiber::Scheduler scheduler;
  scheduler.spawn("test", body);
  scheduler.run();
  if (const auto failure = scheduler.first_failure()) std::rethrow_exception(failure);
  REQUIRE(scheduler.stuck().empty());
}

}  // namespace hearsay::testing
