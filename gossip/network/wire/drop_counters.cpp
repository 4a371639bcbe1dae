#include "gossip/network/wire/drop_counters.hpp"

#include <cstdio>

#include "base/log.hpp"

namespace hearsay::wire {

std::uint64_t DropCounters::Snapshot::total_dropped() const {
  std::uint64_t sum = 0;
  for (std::uint64_t n : dropped) sum += n;
  return sum;
}

void DropCounters::record_accepted() noexcept { accepted_.fetch_add(1, std::memory_order_relaxed); }

void DropCounters::record(DropReason r) noexcept {
  const auto i = static_cast<std::size_t>(r);
  if (i < kDropReasonCount) dropped_[i].fetch_add(1, std::memory_order_relaxed);
}

DropCounters::Snapshot DropCounters::snapshot() const noexcept {
  Snapshot s;
  s.accepted = accepted_.load(std::memory_order_relaxed);
  for (std::size_t i = 0; i < kDropReasonCount; ++i)
    s.dropped[i] = dropped_[i].load(std::memory_order_relaxed);
  return s;
}

std::uint64_t DropCounters::total() const noexcept { return snapshot().total_dropped(); }

std::uint64_t DropCounters::count(DropReason r) const noexcept {
  const auto i = static_cast<std::size_t>(r);
  return i < kDropReasonCount ? dropped_[i].load(std::memory_order_relaxed) : 0;
}

namespace {

std::string describe_sender(std::string_view peer) {
  return peer.empty() ? std::string("an unidentified sender") : "'" + std::string(peer) + "'";
}

std::string seconds_text(DropLogger::Clock::duration d) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", std::chrono::duration<double>(d).count());
  return text;
}

}  // namespace

DropLogger::DropLogger(Clock::duration interval) : interval_(interval) {}

void DropLogger::emit_suppressed(DropReason reason, PerReason& state, Clock::time_point now) {
  std::string line = "dropped " + std::to_string(state.suppressed) + " message" +
                     (state.suppressed == 1 ? "" : "s") + " from " + describe_sender(state.peer) +
                     (state.several_peers ? " and other peers" : "") + " (" + std::string(to_string(reason)) +
                     ") in the last " + seconds_text(now - state.last_line) + " s";
  logging::warn(line);
  state.last_line = now;
  state.suppressed = 0;
  state.peer.clear();
  state.several_peers = false;
}

void DropLogger::drop(std::string_view peer, DropReason reason, std::string_view detail,
                      Clock::time_point now) {
  const auto i = static_cast<std::size_t>(reason);
  if (i >= kDropReasonCount) return;
  std::lock_guard lock(mutex_);
  PerReason& state = state_[i];
  // Record this drop with the ones waiting for the next line.
  if (state.suppressed == 0) {
    state.peer = peer;
  } else if (state.peer != peer) {
    state.several_peers = true;
  }
  ++state.suppressed;
  if (state.ever_logged && now - state.last_line < interval_) return;

  if (state.suppressed == 1) {
    // Nothing pending: report this one message with its detail.
    std::string line =
        "dropped a message from " + describe_sender(peer) + " (" + std::string(to_string(reason)) + ")";
    if (!detail.empty()) line += ": " + std::string(detail);
    logging::warn(line);
    state.last_line = now;
    state.suppressed = 0;
    state.peer.clear();
  } else {
    emit_suppressed(reason, state, now);
  }
  state.ever_logged = true;
}

void DropLogger::flush(Clock::time_point now, bool force) {
  std::lock_guard lock(mutex_);
  for (std::size_t i = 0; i < kDropReasonCount; ++i) {
    PerReason& state = state_[i];
    if (state.suppressed == 0) continue;
    if (!force && now - state.last_line < interval_) continue;
    emit_suppressed(static_cast<DropReason>(i), state, now);
  }
}

}  // namespace hearsay::wire
