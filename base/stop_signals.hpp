// SIGINT and SIGTERM handled for as long as a StopSignals lives, then the previous
// handlers back: how `hearsay peer` and `hearsay sim` learn they should stop.
//
// Signals that arrive together are one request. A Ctrl-C in a terminal reaches the
// process and its whole group, `timeout` forwards what it gets, a launcher may signal the
// process and then its group: a peer that took the second copy for a person's second
// Ctrl-C died at once, without its bye and its final checkpoint. Only a signal that comes
// kSameRequest or more after the first, as a person would press Ctrl-C again when the
// stop seems to hang, ends the process at once (when asked for), with the signal's
// default action (exit status 128 + signal for the shell).
#pragma once
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>

namespace hearsay {

// What a stop signal means, from when the first one came. Lock-free: used in a handler.
class StopRequests {
 public:
  static constexpr std::int64_t kSameRequestNs = 1'000'000'000;  // 1 s
  enum class Meaning { first, same_request, again };

  // `now_ns`: a monotonic clock's nanoseconds.
  Meaning on_signal(std::int64_t now_ns) noexcept {
    std::int64_t expected = kNone;
    if (first_ns_.compare_exchange_strong(expected, now_ns)) return Meaning::first;
    return now_ns - expected < kSameRequestNs ? Meaning::same_request : Meaning::again;
  }
  void reset() noexcept { first_ns_.store(kNone); }

 private:
  static constexpr std::int64_t kNone = INT64_MIN;
  std::atomic<std::int64_t> first_ns_{kNone};
};

class StopSignals {
 public:
  // `on_stop` runs (in the signal handler: it must be async-signal-safe) once per request.
  // second_ends_process: a request after the first ends the process at once.
  // One StopSignals at a time (the state is the process's, as signal dispositions are).
  StopSignals(void (*on_stop)(int), bool second_ends_process);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction old_int_ = {}, old_term_ = {};
};

}  // namespace hearsay
