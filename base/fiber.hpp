// Virtual time for code written for real time: cooperative fibers on one thread, a
// virtual clock, and the three primitives through which hearsay's threads wait
// (fiber::Clock, ConditionVariable, Worker), which behave as steady_clock,
// std::condition_variable and std::thread everywhere except on a Scheduler's thread.
//
// `hearsay sim --engine virtual` runs a thousand peers in one process this way, through
// the same algorithm, mixer and link-emulation code as peer processes: where that code
// would block (a condition variable's wait, a thread's join, a deadline), a fiber parks
// and the scheduler runs the next event in virtual-time order, as SimGrid runs MPI
// programs over a simulated network. Nothing takes wall time but computation, which a
// fiber hands to compute() with its modelled cost: it runs on a pool of threads while
// virtual time moves on, so the steps of many peers that overlap in virtual time run in
// parallel, and the result does not depend on the number of threads.
//
// Determinism: events run in (virtual time, order of scheduling); fibers run one at a
// time on the scheduler's thread and switch only where they wait. Code on a fiber must
// not hold a std::mutex across a wait of another primitive than ConditionVariable (which
// releases it), and must not wait inside a catch block (the thread's exception state is
// not switched with the fiber).
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace hearsay {

namespace fiber {

// The clock of everything in hearsay that waits or measures: steady_clock, except on the
// thread of a running Scheduler, where it reads the scheduler's virtual time. Its
// time_point is steady_clock's, so deadlines and waits need no conversion.
struct Clock : std::chrono::steady_clock {
  static time_point now() noexcept;
};

class Scheduler {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  using duration = std::chrono::steady_clock::duration;
  using FiberId = std::uint64_t;  // 0: none

  struct Options {
    std::size_t stack_bytes = std::size_t{256} << 10;
    int compute_threads = 0;  // 0: compute() runs its work on the scheduler's thread
    // Virtual time at start; not zero, which code may read as "never set".
    time_point start = time_point(std::chrono::hours(1));
  };
  explicit Scheduler(Options options);
  Scheduler() : Scheduler(Options{}) {}
  // Fibers that never ended lose their stacks without unwinding (see stuck()).
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // The scheduler running on this thread (inside run()), or null.
  static Scheduler* current() noexcept;
  time_point now() const noexcept { return now_; }

  // A new fiber, runnable now; `name` is for messages. An exception that leaves `body` is
  // kept (first_failure()). Callable before run() and from the scheduler's thread.
  FiberId spawn(std::string name, std::function<void()> body);
  // `fn` runs on the scheduler's thread, outside any fiber, at virtual time t (now if
  // earlier); it must not wait.
  void at(time_point t, std::function<void()> fn);
  // Runs fibers and events in virtual-time order until nothing is left to run, or until
  // virtual time would pass `until`. Returns whether anything is left.
  bool run(time_point until = time_point::max());
  // Names of the fibers that are parked with nothing left to wake them.
  std::vector<std::string> stuck() const;
  // The first exception that left a fiber's body, with its name; null when none did.
  std::exception_ptr first_failure() const { return first_failure_; }
  std::size_t fibers() const noexcept { return fibers_.size(); }

  // ---- On a fiber of this scheduler ----
  // The running fiber, or 0 (on an event, or outside run()).
  FiberId self() const noexcept;
  // The ticket the running fiber's next park() will have: a waker given it wakes only that
  // park, not a later one.
  std::uint64_t next_ticket() const;
  // Suspends the running fiber until unpark() with its ticket, or until the deadline.
  void park(time_point deadline);
  // Makes fiber `id` runnable now if it is parked with `ticket` (from any fiber or event).
  void unpark(FiberId id, std::uint64_t ticket);
  void sleep_until(time_point t);
  // Runs `work` (computation that touches nothing another fiber uses meanwhile) and
  // returns once it is done and `cost` of virtual time has passed; rethrows its exception.
  void compute(duration cost, std::function<void()> work);
  // Parks until fiber `id` ended (at once for an unknown or ended one).
  void join(FiberId id);

 private:
  struct Fiber;
  struct Event;
  struct Pool;
  void push(time_point t, FiberId fiber, std::uint64_t ticket, std::function<void()> fn);
  void resume(Fiber& f);
  static void entry(unsigned hi, unsigned lo);
  void finish(Fiber& f);

  Options options_;
  time_point now_;
  std::vector<Event> events_;  // a heap, earliest (then first scheduled) on top
  std::uint64_t sequence_ = 0;
  std::vector<std::unique_ptr<Fiber>> fibers_;  // alive, in id order
  FiberId next_id_ = 1;
  Fiber* running_ = nullptr;
  void* main_context_ = nullptr;  // the scheduler's ucontext_t, while run() runs
  std::exception_ptr first_failure_;
  std::unique_ptr<Pool> pool_;
};

// std::condition_variable that, on a fiber, parks it instead of blocking the thread.
class ConditionVariable {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  void notify_all() noexcept;
  void notify_one() noexcept { notify_all(); }  // waiters re-check their predicates
  void wait(std::unique_lock<std::mutex>& lock) { wait_until(lock, time_point::max()); }
  template <class Pred>
  void wait(std::unique_lock<std::mutex>& lock, Pred pred) {
    while (!pred()) wait(lock);
  }
  std::cv_status wait_until(std::unique_lock<std::mutex>& lock, time_point deadline);
  template <class Pred>
  bool wait_until(std::unique_lock<std::mutex>& lock, time_point deadline, Pred pred) {
    while (!pred())
      if (wait_until(lock, deadline) == std::cv_status::timeout) return pred();
    return true;
  }

 private:
  std::condition_variable cv_;
  // Parked fibers and their tickets: touched only on a scheduler's thread.
  std::vector<std::pair<Scheduler::FiberId, std::uint64_t>> fibers_;
};

// std::thread, or a fiber when created on a fiber of a Scheduler. The destructor joins.
class Worker {
 public:
  Worker() = default;
  // name: the thread's name (at most 15 characters shown), or the fiber's.
  Worker(std::string name, std::function<void()> body);
  Worker(Worker&& other) noexcept { *this = std::move(other); }
  Worker& operator=(Worker&& other) noexcept;
  ~Worker() { join(); }
  bool joinable() const noexcept { return thread_.joinable() || fiber_ != 0; }
  void join();
  // Whether this worker is a fiber.
  bool is_fiber() const noexcept { return scheduler_ != nullptr; }

 private:
  std::thread thread_;
  Scheduler* scheduler_ = nullptr;
  Scheduler::FiberId fiber_ = 0;
};

// On a fiber: the scheduler's virtual sleep; elsewhere std::this_thread::sleep_until.
void sleep_until(std::chrono::steady_clock::time_point t);

}  // namespace fiber
}  // namespace hearsay
