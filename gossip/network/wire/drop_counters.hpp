// What a receiver does with messages it refuses: count them per DropReason (for
// metrics) and log them without flooding the log when a peer sends garbage in a loop.
#pragma once
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include "gossip/network/wire/header.hpp"

namespace hearsay::wire {

// Thread-safe counters: one for accepted messages, one per DropReason. Relaxed atomics:
// each counter is exact, a snapshot taken while others record may mix instants.
class DropCounters {
 public:
  struct Snapshot {
    std::uint64_t accepted = 0;
    std::array<std::uint64_t, kDropReasonCount> dropped{};
    std::uint64_t total_dropped() const;
    std::uint64_t operator[](DropReason r) const { return dropped[static_cast<std::size_t>(r)]; }
  };

  void record_accepted() noexcept;
  // r must be a real reason (not DropReason::count_); anything else is ignored.
  void record(DropReason r) noexcept;
  Snapshot snapshot() const noexcept;
  // Messages dropped so far, all reasons together.
  std::uint64_t total() const noexcept;
  std::uint64_t accepted() const noexcept { return accepted_.load(std::memory_order_relaxed); }
  std::uint64_t count(DropReason r) const noexcept;

 private:
  std::atomic<std::uint64_t> accepted_{0};
  std::array<std::atomic<std::uint64_t>, kDropReasonCount> dropped_{};
};

// Rate-limited warnings about drops: at most one line per reason per interval. The
// first drop of a reason is logged at once; later ones within the interval are counted
// and reported by the next line for that reason, e.g.
//   dropped 37 messages from 'peer3' (bad_checksum) in the last 1.0 s
// A burst followed by silence stays pending until the next drop of that reason or
// flush(); call flush() periodically (or at shutdown) to report it. Thread-safe.
class DropLogger {
 public:
  using Clock = std::chrono::steady_clock;
  explicit DropLogger(Clock::duration interval = std::chrono::seconds(1));

  // One dropped message from `peer` (empty when unknown, e.g. undecodable). `detail`
  // is added to lines that report a single message (the first of a burst).
  void drop(std::string_view peer, DropReason reason, std::string_view detail = {},
            Clock::time_point now = Clock::now());
  // Logs every pending count whose interval has passed (all of them when force is set).
  void flush(Clock::time_point now = Clock::now(), bool force = false);

 private:
  struct PerReason {
    bool ever_logged = false;
    Clock::time_point last_line{};
    std::uint64_t suppressed = 0;  // drops since last_line that no line reported yet
    std::string peer;              // sender of the first suppressed drop
    bool several_peers = false;    // the suppressed drops came from more than one peer
  };
  void emit_suppressed(DropReason reason, PerReason& state, Clock::time_point now);

  Clock::duration interval_;
  std::mutex mutex_;
  std::array<PerReason, kDropReasonCount> state_;
};

}  // namespace hearsay::wire
