// Fibers are ucontext contexts with their own stacks; the scheduler's loop is the main
// context they switch back to whenever they park or end.
#include "base/fiber.hpp"

#include <sys/mman.h>
#include <ucontext.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <future>
#include <stdexcept>

#include "base/thread_name.hpp"

namespace hearsay {
namespace fiber {
namespace {
thread_local Scheduler* t_current = nullptr;

// A stack the kernel fills in on first touch: a thousand fibers cost what they use.
struct Stack {
  void* base = nullptr;
  std::size_t bytes = 0;
  explicit Stack(std::size_t size) : bytes(size) {
    base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) throw std::runtime_error("fiber: cannot map a stack of " + std::to_string(size));
  }
  ~Stack() { ::munmap(base, bytes); }
  Stack(const Stack&) = delete;
  Stack& operator=(const Stack&) = delete;
};
}  // namespace

struct Scheduler::Fiber {
  FiberId id = 0;
  std::string name;
  std::function<void()> body;
  Stack stack;
  ucontext_t context{};
  enum class State { parked, running, done } state = State::parked;
  std::uint64_t ticket = 0;  // of the current (or last) park
  // The current park's deadline, and the earliest timer event queued for this fiber (max:
  // none known). A fiber that parks again and again with deadlines that do not come (a
  // message arrives first) queues a new timer only when its deadline is earlier than one
  // already queued: the heap does not fill with millions of stale timers.
  time_point deadline = time_point::max();
  time_point timer_at = time_point::max();
  Scheduler* owner = nullptr;
  std::vector<std::pair<FiberId, std::uint64_t>> joiners;  // parked in join() on this one
  Fiber(std::size_t stack_bytes) : stack(stack_bytes) {}
};

struct Scheduler::Event {
  time_point time;
  std::uint64_t sequence = 0;
  FiberId fiber = 0;  // resume this fiber if it is still parked with `ticket`...
  std::uint64_t ticket = 0;
  std::function<void()> fn;  // ...or run this
};

namespace {
constexpr std::uint64_t kTimer = 0;  // an event's ticket that means "check the deadline" (parks count from 1)
bool later(const auto& a, const auto& b) {
  return a.time != b.time ? a.time > b.time : a.sequence > b.sequence;
}
}  // namespace

// The compute threads: a queue of work, each item run once by whichever thread is free.
struct Scheduler::Pool {
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::function<void()>> queue;
  bool stopping = false;
  std::vector<std::thread> threads;
  explicit Pool(int n) {
    for (int i = 0; i < n; ++i)
      threads.emplace_back([this, i] {
        name_this_thread(("hs-vcompute" + std::to_string(i)).c_str());
        std::unique_lock lock(mutex);
        for (;;) {
          changed.wait(lock, [&] { return stopping || !queue.empty(); });
          if (queue.empty()) return;
          auto job = std::move(queue.front());
          queue.pop_front();
          lock.unlock();
          job();
          lock.lock();
        }
      });
  }
  ~Pool() {
    {
      std::lock_guard lock(mutex);
      stopping = true;
    }
    changed.notify_all();
    for (auto& t : threads) t.join();
  }
  void submit(std::function<void()> job) {
    {
      std::lock_guard lock(mutex);
      queue.push_back(std::move(job));
    }
    changed.notify_one();
  }
};

Scheduler::Scheduler(Options options) : options_(options), now_(options.start) {
  if (options_.compute_threads > 0) pool_ = std::make_unique<Pool>(options_.compute_threads);
}

Scheduler::~Scheduler() = default;

Scheduler* Scheduler::current() noexcept { return t_current; }

Scheduler::FiberId Scheduler::self() const noexcept { return running_ ? running_->id : 0; }

void Scheduler::push(time_point t, FiberId fiber, std::uint64_t ticket, std::function<void()> fn) {
  events_.push_back(Event{std::max(t, now_), sequence_++, fiber, ticket, std::move(fn)});
  std::push_heap(events_.begin(), events_.end(), [](const Event& a, const Event& b) { return later(a, b); });
}

Scheduler::FiberId Scheduler::spawn(std::string name, std::function<void()> body) {
  auto f = std::make_unique<Fiber>(options_.stack_bytes);
  f->id = next_id_++;
  f->name = std::move(name);
  f->body = std::move(body);
  f->owner = this;
  ::getcontext(&f->context);
  f->context.uc_stack.ss_sp = f->stack.base;
  f->context.uc_stack.ss_size = f->stack.bytes;
  f->context.uc_link = nullptr;  // entry() never returns: it switches back itself
  const auto address = reinterpret_cast<std::uintptr_t>(f.get());
  ::makecontext(&f->context, reinterpret_cast<void (*)()>(&Scheduler::entry), 2,
                static_cast<unsigned>(address >> 32), static_cast<unsigned>(address & 0xffffffffu));
  const FiberId id = f->id;
  f->ticket = 1;
  push(now_, id, 1, nullptr);
  fibers_.push_back(std::move(f));
  return id;
}

void Scheduler::entry(unsigned hi, unsigned lo) {
  auto* f = reinterpret_cast<Fiber*>((static_cast<std::uintptr_t>(hi) << 32) | lo);
  try {
    f->body();
  } catch (const std::exception& e) {
    if (!f->owner->first_failure_)
      f->owner->first_failure_ =
          std::make_exception_ptr(std::runtime_error("fiber '" + f->name + "': " + e.what()));
  } catch (...) {
    if (!f->owner->first_failure_)
      f->owner->first_failure_ =
          std::make_exception_ptr(std::runtime_error("fiber '" + f->name + "' failed"));
  }
  f->body = nullptr;
  f->state = Fiber::State::done;
  ::setcontext(static_cast<ucontext_t*>(f->owner->main_context_));
}

void Scheduler::at(time_point t, std::function<void()> fn) { push(t, 0, 0, std::move(fn)); }

void Scheduler::resume(Fiber& f) {
  f.state = Fiber::State::running;
  running_ = &f;
  ::swapcontext(static_cast<ucontext_t*>(main_context_), &f.context);
  running_ = nullptr;
  if (f.state == Fiber::State::done) finish(f);
}

void Scheduler::finish(Fiber& f) {
  for (const auto& [joiner, ticket] : f.joiners) unpark(joiner, ticket);
  const FiberId id = f.id;
  auto it = std::ranges::lower_bound(fibers_, id, {}, [](const auto& p) { return p->id; });
  if (it != fibers_.end() && (*it)->id == id) fibers_.erase(it);
}

bool Scheduler::run(time_point until) {
  ucontext_t main{};
  main_context_ = &main;
  Scheduler* const outer = t_current;
  t_current = this;
  const auto cmp = [](const Event& a, const Event& b) { return later(a, b); };
  while (!events_.empty() && events_.front().time <= until) {
    std::pop_heap(events_.begin(), events_.end(), cmp);
    Event e = std::move(events_.back());
    events_.pop_back();
    now_ = std::max(now_, e.time);
    if (e.fn) {
      e.fn();
      continue;
    }
    auto it = std::ranges::lower_bound(fibers_, e.fiber, {}, [](const auto& p) { return p->id; });
    if (it == fibers_.end() || (*it)->id != e.fiber) continue;  // ended since
    Fiber& f = **it;
    if (e.ticket == kTimer) {
      if (f.timer_at == e.time) f.timer_at = time_point::max();
      if (f.state != Fiber::State::parked) continue;
      if (f.deadline <= now_) {
        resume(f);
      } else if (f.deadline < f.timer_at) {  // woken early before: its new deadline needs a timer
        f.timer_at = f.deadline;
        push(f.deadline, f.id, kTimer, nullptr);
      }
      continue;
    }
    if (f.state != Fiber::State::parked || f.ticket != e.ticket) continue;  // a stale wake-up
    resume(f);
  }
  t_current = outer;
  main_context_ = nullptr;
  if (!events_.empty() && until != time_point::max()) now_ = std::max(now_, until);
  return !events_.empty();
}

std::vector<std::string> Scheduler::stuck() const {
  std::vector<std::string> names;
  for (const auto& f : fibers_) names.push_back(f->name);
  return names;
}

std::uint64_t Scheduler::next_ticket() const {
  if (!running_) throw std::logic_error("fiber: next_ticket() outside a fiber");
  return running_->ticket + 1;
}

void Scheduler::park(time_point deadline) {
  Fiber* f = running_;
  if (!f) throw std::logic_error("fiber: park() outside a fiber (an event must not wait)");
  f->ticket += 1;
  f->state = Fiber::State::parked;
  f->deadline = deadline;
  if (deadline < f->timer_at) {
    f->timer_at = deadline;
    push(deadline, f->id, kTimer, nullptr);
  }
  ::swapcontext(&f->context, static_cast<ucontext_t*>(main_context_));
  // Resumed by resume(): running_ and the state are set again.
}

void Scheduler::unpark(FiberId id, std::uint64_t ticket) { push(now_, id, ticket, nullptr); }

void Scheduler::sleep_until(time_point t) {
  while (now_ < t) park(t);
}

void Scheduler::compute(duration cost, std::function<void()> work) {
  const FiberId id = self();
  if (id == 0) throw std::logic_error("fiber: compute() outside a fiber");
  auto task = std::make_shared<std::packaged_task<void()>>(std::move(work));
  auto done = task->get_future();
  if (pool_) pool_->submit([task] { (*task)(); });
  bool due = false;
  const std::uint64_t ticket = next_ticket();
  at(now_ + std::max(cost, duration::zero()),
     [this, task, &done, &due, id, ticket, pooled = pool_ != nullptr] {
       if (!pooled) (*task)();
       done.wait();
       due = true;
       unpark(id, ticket);
     });
  while (!due) park(time_point::max());
  done.get();
}

void Scheduler::join(FiberId id) {
  if (id == self()) throw std::logic_error("fiber: a fiber cannot join itself");
  for (;;) {
    auto it = std::ranges::lower_bound(fibers_, id, {}, [](const auto& p) { return p->id; });
    if (it == fibers_.end() || (*it)->id != id) return;
    (*it)->joiners.emplace_back(self(), next_ticket());
    park(time_point::max());
  }
}

// ---- ConditionVariable, Worker ----------------------------------------------------------------

void ConditionVariable::notify_all() noexcept {
  cv_.notify_all();
  if (fibers_.empty()) return;
  Scheduler* s = Scheduler::current();
  if (!s) return;  // no scheduler runs: the parked fibers will never run again anyway
  for (const auto& [id, ticket] : fibers_) s->unpark(id, ticket);
  fibers_.clear();
}

std::cv_status ConditionVariable::wait_until(std::unique_lock<std::mutex>& lock, time_point deadline) {
  Scheduler* s = Scheduler::current();
  if (!s) return cv_.wait_until(lock, deadline);
  if (s->self() == 0) throw std::logic_error("ConditionVariable: an event of the scheduler must not wait");
  if (s->now() >= deadline) return std::cv_status::timeout;
  fibers_.emplace_back(s->self(), s->next_ticket());
  lock.unlock();
  s->park(deadline);
  lock.lock();
  return s->now() >= deadline ? std::cv_status::timeout : std::cv_status::no_timeout;
}

Worker::Worker(std::string name, std::function<void()> body) {
  if (Scheduler* s = Scheduler::current(); s != nullptr && s->self() != 0) {
    scheduler_ = s;
    fiber_ = s->spawn(std::move(name), std::move(body));
    return;
  }
  thread_ = std::thread([name = std::move(name), body = std::move(body)] {
    name_this_thread(name.c_str());
    body();
  });
}

Worker& Worker::operator=(Worker&& other) noexcept {
  join();
  thread_ = std::move(other.thread_);
  scheduler_ = std::exchange(other.scheduler_, nullptr);
  fiber_ = std::exchange(other.fiber_, 0);
  return *this;
}

void Worker::join() {
  if (thread_.joinable()) thread_.join();
  if (fiber_ != 0 && scheduler_ != nullptr && Scheduler::current() == scheduler_ && scheduler_->self() != 0)
    scheduler_->join(fiber_);
  fiber_ = 0;
}

Clock::time_point Clock::now() noexcept {
  if (const Scheduler* s = Scheduler::current()) return s->now();
  return std::chrono::steady_clock::now();
}

void sleep_until(std::chrono::steady_clock::time_point t) {
  if (Scheduler* s = Scheduler::current(); s != nullptr && s->self() != 0) {
    s->sleep_until(t);
    return;
  }
  std::this_thread::sleep_until(t);
}

}  // namespace fiber

}  // namespace hearsay
