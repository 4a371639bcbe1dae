// The queue between a transport's I/O (a background thread, or the sending thread of
// the in-process fabric) and its caller: accepted messages in arrival order, plus the
// peer errors waiting to be rethrown on the caller's thread. Thread-safe.
//
// The inbox is bounded so that peers sending faster than the caller receives cannot
// grow memory without limit: producers ask has_room() and stop reading their sockets
// while it is false (ZeroMQ then pushes back on the senders); on_room() tells them when
// a receive made room again.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>

#include "gossip/transport/message.hpp"

namespace hearsay::transport {

class Inbox {
 public:
  using Clock = std::chrono::steady_clock;
  struct Limits {
    std::size_t max_messages = 4096;
    std::size_t max_bytes = std::size_t{2} << 30;  // payload bytes queued
  };
  explicit Inbox(Limits limits) : limits_(limits) {}

  // Queues an accepted message. Never refuses: the limit is enforced by producers
  // checking has_room() before reading more.
  void push(Message message);
  // Queues an error for the caller; it wakes a waiting receive.
  void push_error(std::exception_ptr error);
  bool has_room() const;
  // Called (from the receiving thread, without the inbox lock) whenever a pop takes
  // the inbox from full to having room.
  void set_on_room(std::function<void()> on_room);

  // Rethrows the oldest pending error, if any, removing it.
  void rethrow_pending();
  // The first message matching pred (all when pred is empty), waiting until the
  // deadline; rethrows pending errors, also ones that arrive while waiting.
  std::optional<Message> pop(Clock::time_point deadline,
                             const std::function<bool(const Message&)>& pred = {});
  // Whether a message is queued, waiting until the deadline; rethrows pending errors.
  bool wait(Clock::time_point deadline);
  // Whether a message or an error is waiting, waiting until the deadline; takes nothing
  // and throws nothing (the next pop or wait delivers what is there).
  bool ready(Clock::time_point deadline) const;
  std::size_t size() const;

 private:
  bool has_room_locked() const;
  void rethrow_locked(std::unique_lock<std::mutex>& lock);

  const Limits limits_;
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::deque<Message> messages_;
  std::size_t bytes_ = 0;
  std::deque<std::exception_ptr> errors_;
  std::function<void()> on_room_;
};

}  // namespace hearsay::transport
