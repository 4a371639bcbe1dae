// The queue between a transport's I/O (a background thread, or the sending thread of
// the in-process fabric) and its caller: accepted messages in arrival order, plus the
// peer errors waiting to be rethrown on the caller's thread. Thread-safe.
//
// Messages travel in two lanes. The control lane holds what membership and the
// training-state transfer exchange (hello, welcome, members, bye, state_request,
// state_reply: see is_control) and is read by their own thread; the data lane holds
// everything else and is what the algorithms read. Without the split an algorithm's
// receive() on the communication thread would swallow membership messages.
//
// The data lane is bounded so that peers sending faster than the caller receives cannot
// grow memory without limit: producers ask has_room() and stop reading their sockets
// while it is false (ZeroMQ then pushes back on the senders); on_room() tells them when
// a receive made room again. The control lane never pushes back, so that a process that
// reads no control messages cannot stall its data: past its own limits it drops its
// oldest message (membership is soft state that peers resend every heartbeat).
//
// Peer errors are queued on both lanes, so that each lane's reader learns of them.
//
// With set_hold_until_due, a message whose header has a `due` later than now (link
// emulation held at the receiver: gossip/network/emulation/emulated_transport.hpp) waits
// out of sight until then: pops, waits, ready() and size() see it from its due on, with its
// due as its arrival, and a reader's wait ends at the due. A message from a sender with a
// message still held waits behind it, so that one sender's messages keep their order.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "base/fiber.hpp"
#include "gossip/network/transport/message.hpp"
#include "gossip/network/transport/progress_estimate.hpp"

namespace hearsay::transport {

// Whether messages of type t travel in the control lane.
bool is_control(wire::MessageType t);

class Inbox {
 public:
  using Clock = hearsay::fiber::Clock;
  enum class Lane { data, control };
  struct Limits {
    std::size_t max_messages = 4096;
    std::size_t max_bytes = std::size_t{2} << 30;  // payload bytes queued
    // The control lane: past these, its oldest message (and error) is dropped.
    std::size_t max_control_messages = 1024;
    std::size_t max_control_errors = 256;
  };
  explicit Inbox(Limits limits) : limits_(limits) {}

  // Queues an accepted message in the lane of its type. Never refuses: the data lane's
  // limit is enforced by producers checking has_room() before reading more.
  void push(Message message);
  // Queues an error for the callers of both lanes; it wakes waiting receives.
  void push_error(std::exception_ptr error);
  // Whether the data lane has room.
  bool has_room() const;
  // Called (from the receiving thread, without the inbox lock) whenever a pop takes
  // the data lane from full to having room.
  void set_on_room(std::function<void()> on_room);
  // Every message pushed tells `progress` the sender's steps (and a bye its departure).
  // Set before the first push; null: none.
  void set_progress(std::shared_ptr<ProgressEstimate> progress) { progress_ = std::move(progress); }
  // Holds messages until their header's `due` (above). Set before the first push.
  void set_hold_until_due(bool on) { hold_until_due_ = on; }

  // Rethrows the lane's oldest pending error, if any, removing it.
  void rethrow_pending(Lane lane = Lane::data);
  // The first message of the lane matching pred (all when pred is empty), waiting until
  // the deadline; rethrows the lane's pending errors, also ones that arrive while waiting.
  // With a ticket (from wakes(lane)), it also gives up, returning nullopt, once
  // wake(lane) was called since: how a waiting thread is told to stop without polling.
  std::optional<Message> pop(Clock::time_point deadline, const std::function<bool(const Message&)>& pred = {},
                             Lane lane = Lane::data, std::optional<std::uint64_t> ticket = std::nullopt);
  // Whether a data message is queued, waiting until the deadline; rethrows pending errors.
  bool wait(Clock::time_point deadline);
  // Whether a data message or a data-lane error is waiting, waiting until the deadline;
  // takes nothing and throws nothing (the next pop or wait delivers what is there).
  bool ready(Clock::time_point deadline) const;
  // As ready(), and also true once wake() was called since wakes() returned `ticket`:
  // a thread that waits for messages can be woken for something else (read the ticket
  // before checking that something else, under the same lock that guards it).
  bool ready(Clock::time_point deadline, std::uint64_t ticket) const;
  // Each lane counts its wakes; a wake rouses only that lane's waiters.
  std::uint64_t wakes(Lane lane = Lane::data) const;
  void wake(Lane lane = Lane::data);
  // Messages queued in a lane.
  std::size_t size(Lane lane = Lane::data) const;
  // Control messages dropped because nobody read the control lane in time.
  std::uint64_t control_overflow() const;

 private:
  struct Held {
    Clock::time_point due;
    std::uint64_t sequence = 0;  // arrival order among equal dues
    Message message;
  };
  struct Queue {
    std::deque<Message> messages;
    std::size_t bytes = 0;
    std::deque<std::exception_ptr> errors;
    // Held until due (set_hold_until_due), a heap: the earliest first. Per lane, so that a
    // lane's readers wait for its own dues only.
    std::vector<Held> held;
  };
  Queue& queue(Lane lane) const { return lane == Lane::data ? data_ : control_; }
  static Lane lane_of(const Message& message) {
    return is_control(message.type()) ? Lane::control : Lane::data;
  }
  // Queues a message in its lane (the lock held).
  void enqueue_locked(Message message) const;
  // Whether `message` is to be held (the lock held): then it is, and true.
  bool hold_locked(Message& message);
  // Moves the lane's held messages that are due into it; when its next one is due.
  std::optional<Clock::time_point> release_due_locked(Lane lane) const;
  // The deadline a wait uses: `deadline`, or sooner the next held message's due.
  static Clock::time_point until(Clock::time_point deadline, std::optional<Clock::time_point> next) {
    return next && *next < deadline ? *next : deadline;
  }
  bool has_room_locked() const;
  bool ready_until(Clock::time_point deadline, std::optional<std::uint64_t> ticket) const;
  void rethrow_locked(std::unique_lock<std::mutex>& lock, Lane lane);
  fiber::ConditionVariable& changed(Lane lane) const {
    return lane == Lane::data ? data_changed_ : control_changed_;
  }
  std::uint64_t wakes_of(Lane lane) const { return lane == Lane::data ? data_wakes_ : control_wakes_; }

  const Limits limits_;
  std::shared_ptr<ProgressEstimate> progress_;
  mutable std::mutex mutex_;
  // One per lane, so that a message wakes only the threads reading its lane.
  // Fiber-aware: on a virtual-time scheduler a wait parks the fiber (base/fiber.hpp).
  mutable fiber::ConditionVariable data_changed_, control_changed_;
  // Mutable: a held message comes into sight when due, also during a const look.
  mutable Queue data_;
  mutable Queue control_;
  std::uint64_t held_sequence_ = 0;
  bool hold_until_due_ = false;
  mutable std::uint64_t control_overflow_ = 0;
  std::uint64_t data_wakes_ = 0, control_wakes_ = 0;
  std::function<void()> on_room_;
};

}  // namespace hearsay::transport
