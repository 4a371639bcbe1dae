#include "gossip/mixing/algorithms/mixer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

#include "base/log.hpp"
#include "base/thread_name.hpp"

namespace hearsay::algorithms {
namespace {
// The longest wait of the idle communication thread for a partner's message. A round
// request or a stop wakes it at once (Transport::wake); this only bounds the damage of
// a missed wake-up.
constexpr auto kIdleSlice = std::chrono::milliseconds(100);

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}
}  // namespace

Mixer::Mixer(std::unique_ptr<Algorithm> algorithm, std::size_t parameter_count, std::uint64_t first_round,
             ParameterStore* buffers_from)
    : algorithm_(std::move(algorithm)),
      count_(parameter_count),
      step_scale_(algorithm_ ? static_cast<float>(algorithm_->options().shard_share) : 1.0f),
      next_round_(first_round) {
  if (!algorithm_) throw std::invalid_argument("Mixer: no algorithm");
  if (!(step_scale_ > 0 && std::isfinite(step_scale_)))
    throw std::invalid_argument("Mixer: the shard share must be positive and finite, not " +
                                std::to_string(step_scale_));
  if (const AlgorithmOptions& o = algorithm_->options(); o.quasi_global_momentum)
    momentum_.emplace(o.momentum, o.momentum_values > 0 ? std::min(o.momentum_values, count_) : count_);
  if (buffers_from != nullptr) {
    work_ = buffers_from->mixer_buffer(0);
    base_ = buffers_from->mixer_buffer(1);
  }
  if (work_.size() != count_ || base_.size() != count_) {
    owned_.assign(2 * count_, 0.0f);
    work_ = std::span(owned_).first(count_);
    base_ = std::span(owned_).last(count_);
  }
  thread_ = fiber::Worker("hs-mixer", [this] { run(); });
}

Mixer::~Mixer() { stop(); }

void Mixer::stop() noexcept {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  algorithm_->transport().wake();
  if (thread_.joinable()) thread_.join();
  std::lock_guard lock(mutex_);
  // Nobody runs a round any more: one asked for and not begun is dropped (with overlap the
  // training thread would wait for it at its next sync).
  round_requested_ = false;
  new_peers_.reset();
  changed_.notify_all();
}

void Mixer::set_peers(PeerSet peers) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    new_peers_ = std::move(peers);
  }
  changed_.notify_all();
  algorithm_->transport().wake();  // the thread may be waiting for partners' messages
}

void Mixer::hand_over_peers_locked() {
  PeerSet peers = std::move(*new_peers_);
  new_peers_.reset();
  try {
    algorithm_->set_peers(std::move(peers));
  } catch (...) {
    if (!failure_) failure_ = std::current_exception();
  }
  changed_.notify_all();  // a sync waits for the hand-over (wait_idle)
}

void Mixer::check_size(std::size_t given) const {
  if (given != count_)
    throw std::invalid_argument("Mixer: " + std::to_string(given) + " parameters given, " +
                                std::to_string(count_) + " expected");
}

void Mixer::rethrow_failure_locked() {
  if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
}

void Mixer::wait_idle(std::unique_lock<std::mutex>& lock) {
  const auto start = Clock::now();
  changed_.wait(lock, [&] { return !round_requested_ && !round_running_ && !new_peers_; });
  stats_.waiting_seconds += seconds_since(start);
}

void Mixer::sync_locked(ParameterStore& params) {
  if (started_) {
    // The local steps since the last sync are params − base, the round's change work −
    // base: the store does params = work + s (params − base) where the parameters are, and
    // hands the result back in work (this runs on the training thread every round).
    params.add_difference_and_read(work_, base_, step_scale_, work_);
  } else {
    params.read(work_);
    started_ = true;
    changed_.notify_all();  // an idle communication thread may start serving partners now
  }
  std::copy(work_.begin(), work_.end(), base_.begin());
}

void Mixer::training_resumes() {
  std::lock_guard lock(mutex_);
  training_resumed_ = Clock::now();
}

void Mixer::after_step(std::span<float> params, std::uint64_t step) {
  HostParameterStore host(params);
  after_step(host, step);
}

void Mixer::after_step(ParameterStore& params, std::uint64_t step) {
  check_size(params.size());
  const std::uint64_t every = std::max<std::uint64_t>(algorithm_->options().gossip_every, 1);
  if (step == 0 || step % every != 0) return;
  const auto due = Clock::now();
  note_compute(due);
  std::unique_lock lock(mutex_);
  wait_idle(lock);  // with overlap: the previous round (at most one round stale)
  rethrow_failure_locked();
  sync_locked(params);
  // Training resumes when this returns: the next round's compute is timed from then.
  struct ResumeMark {
    Clock::time_point& mark;
    ~ResumeMark() { mark = Clock::now(); }
  } resume{training_resumed_};
  if (stopping_) return;  // stopped: nobody runs rounds any more
  if (!algorithm_->round_needed()) {
    stats_.rounds_skipped += 1;
    return;
  }
  round_requested_ = true;
  changed_.notify_all();
  algorithm_->transport().wake();  // the thread may be waiting for partners' messages
  if (algorithm_->options().overlap) return;
  wait_idle(lock);
  // The parameters have not moved since the sync above (this thread was waiting), so
  // the round's result replaces them exactly: a copy instead of a delta.
  params.write(work_);
  std::copy(work_.begin(), work_.end(), base_.begin());
  rethrow_failure_locked();
}

void Mixer::flush(std::span<float> params) {
  HostParameterStore host(params);
  flush(host);
}

void Mixer::flush(ParameterStore& params) {
  check_size(params.size());
  std::unique_lock lock(mutex_);
  wait_idle(lock);
  sync_locked(params);
  rethrow_failure_locked();
}

void Mixer::note_compute(Clock::time_point due) {
  if (training_resumed_ != Clock::time_point{}) {
    compute_.add(due - training_resumed_);
    algorithm_->set_compute_per_round(compute_.quantile(0.5));
  }
}

Mixer::Stats Mixer::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void Mixer::run() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (new_peers_) {  // before a round: the round mixes with the new set
      hand_over_peers_locked();
      continue;
    }
    if (round_requested_) {
      round_requested_ = false;
      round_running_ = true;
      const std::uint64_t round = next_round_++;
      lock.unlock();  // the training thread waits on round_running_, never touches work_
      const auto start = Clock::now();
      std::exception_ptr error;
      try {
        if (momentum_) momentum_->before_round(work_);
        algorithm_->mix(work_, round);
        if (momentum_) momentum_->after_round(work_);
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      round_running_ = false;
      stats_.rounds += 1;
      stats_.round_seconds += seconds_since(start);
      if (error && !failure_) failure_ = error;
      changed_.notify_all();
      continue;
    }
    // Idle: nothing to do until the next round, unless the algorithm answers partners.
    if (!started_ || !algorithm_->serves_between_rounds()) {
      changed_.wait(lock, [&] {
        return stopping_ || round_requested_ || new_peers_ ||
               (started_ && algorithm_->serves_between_rounds());
      });
      continue;
    }
    // Wait for a partner's message without the lock, so that the training thread can
    // sync meanwhile; then answer what came, under the lock (serve() changes work_),
    // without waiting for more.
    // The ticket is taken under the lock that guards round_requested_ and stopping_, so
    // a request made after this check wakes the wait.
    const std::uint64_t ticket = algorithm_->transport().wake_ticket();
    lock.unlock();
    const bool arrived = algorithm_->transport().ready(Clock::now() + kIdleSlice, ticket);
    lock.lock();
    if (!arrived || stopping_ || round_requested_) continue;
    try {
      algorithm_->serve(work_, Clock::now());
    } catch (const std::exception& e) {
      // A partner broke while we served it. The algorithm has seen the error (and
      // marked the peer) and meets it again in its next round if it matters.
      logging::debug(std::string("mixer: while serving: ") + e.what());
    }
  }
}

}  // namespace hearsay::algorithms
