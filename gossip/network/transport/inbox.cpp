#include "gossip/network/transport/inbox.hpp"

#include <algorithm>

namespace hearsay::transport {

bool is_control(wire::MessageType t) {
  switch (t) {
    case wire::MessageType::hello:
    case wire::MessageType::welcome:
    case wire::MessageType::members:
    case wire::MessageType::bye:
    case wire::MessageType::refused:
    case wire::MessageType::state_request:
    case wire::MessageType::state_reply:
      return true;
    default:
      return false;
  }
}

void Inbox::push(Message message) {
  if (progress_) {
    if (message.header().trained > 0)
      progress_->heard(message.sender(), message.header().trained, Clock::now());
    if (message.type() == wire::MessageType::bye) progress_->left(message.sender());
  }
  const Lane lane = lane_of(message);
  {
    std::lock_guard lock(mutex_);
    if (!hold_until_due_ || !hold_locked(message)) enqueue_locked(std::move(message));
  }
  // Only the lane's own readers: the training side's stream of parameter messages must
  // not wake the membership and state threads that wait for control messages. A held
  // message wakes them too, so that their waits end at its due.
  changed(lane).notify_all();
}

void Inbox::enqueue_locked(Message message) const {
  const Lane lane = lane_of(message);
  Queue& q = queue(lane);
  q.bytes += message.payload().size();
  q.messages.push_back(std::move(message));
  if (lane == Lane::control) {
    while (q.messages.size() > 1 &&
           (q.messages.size() > limits_.max_control_messages || q.bytes > limits_.max_bytes)) {
      q.bytes -= q.messages.front().payload().size();
      q.messages.pop_front();
      ++control_overflow_;
    }
  }
}

namespace {
constexpr auto held_later = [](const auto& a, const auto& b) {
  return a.due != b.due ? a.due > b.due : a.sequence > b.sequence;
};
}  // namespace

bool Inbox::hold_locked(Message& message) {
  const auto due_ns = message.header().due_ns;
  Clock::time_point due = due_time(due_ns);
  std::vector<Held>& held = queue(lane_of(message)).held;
  bool behind = false;  // a message of the same sender is still held: this one waits behind it
  for (const Held& h : held)
    if (h.message.sender() == message.sender()) {
      behind = true;
      due = std::max(due, h.due);
    }
  if (!behind && (due_ns == 0 || due <= Clock::now())) return false;
  held.push_back(Held{due, held_sequence_++, std::move(message)});
  std::push_heap(held.begin(), held.end(), held_later);
  return true;
}

std::optional<Inbox::Clock::time_point> Inbox::release_due_locked(Lane lane) const {
  std::vector<Held>& held = queue(lane).held;
  if (held.empty()) return std::nullopt;
  const auto now = Clock::now();
  while (!held.empty() && held.front().due <= now) {
    std::pop_heap(held.begin(), held.end(), held_later);
    Held& h = held.back();
    // It arrives now, as far as its reader can tell: when its emulated link delivered it.
    h.message.set_received_at(
        std::max(std::chrono::steady_clock::time_point(h.due), h.message.received_at()));
    enqueue_locked(std::move(h.message));
    held.pop_back();
  }
  if (held.empty()) return std::nullopt;
  return held.front().due;
}

void Inbox::push_error(std::exception_ptr error) {
  {
    std::lock_guard lock(mutex_);
    data_.errors.push_back(error);
    control_.errors.push_back(std::move(error));
    if (control_.errors.size() > limits_.max_control_errors) control_.errors.pop_front();
  }
  data_changed_.notify_all();
  control_changed_.notify_all();
}

bool Inbox::has_room() const {
  std::lock_guard lock(mutex_);
  return has_room_locked();
}

bool Inbox::has_room_locked() const {
  return data_.messages.size() < limits_.max_messages && data_.bytes < limits_.max_bytes;
}

void Inbox::set_on_room(std::function<void()> on_room) {
  std::lock_guard lock(mutex_);
  on_room_ = std::move(on_room);
}

void Inbox::rethrow_locked(std::unique_lock<std::mutex>& lock, Lane lane) {
  auto& errors = queue(lane).errors;
  if (errors.empty()) return;
  std::exception_ptr error = std::move(errors.front());
  errors.pop_front();
  lock.unlock();
  std::rethrow_exception(error);
}

void Inbox::rethrow_pending(Lane lane) {
  std::unique_lock lock(mutex_);
  rethrow_locked(lock, lane);
}

std::optional<Message> Inbox::pop(Clock::time_point deadline, const std::function<bool(const Message&)>& pred,
                                  Lane lane, std::optional<std::uint64_t> ticket) {
  std::unique_lock lock(mutex_);
  Queue& q = queue(lane);
  for (;;) {
    const auto next = release_due_locked(lane);
    rethrow_locked(lock, lane);
    auto it = pred ? std::find_if(q.messages.begin(), q.messages.end(), pred) : q.messages.begin();
    if (it != q.messages.end()) {
      const bool was_full = lane == Lane::data && !has_room_locked();
      Message message = std::move(*it);
      q.messages.erase(it);
      q.bytes -= message.payload().size();
      const bool room_now = was_full && has_room_locked();
      std::function<void()> on_room = room_now ? on_room_ : nullptr;
      lock.unlock();
      if (on_room) on_room();
      return message;
    }
    if (ticket && wakes_of(lane) != *ticket) return std::nullopt;
    const auto wait_until = until(deadline, next);
    if (changed(lane).wait_until(lock, wait_until) == std::cv_status::timeout && wait_until == deadline) {
      // One last look: the deadline may have passed while a message was being queued.
      release_due_locked(lane);
      rethrow_locked(lock, lane);
      if (pred ? std::none_of(q.messages.begin(), q.messages.end(), pred) : q.messages.empty())
        return std::nullopt;
    }
  }
}

bool Inbox::wait(Clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  for (;;) {
    const auto next = release_due_locked(Lane::data);
    rethrow_locked(lock, Lane::data);
    if (!data_.messages.empty()) return true;
    const auto wait_until = until(deadline, next);
    if (data_changed_.wait_until(lock, wait_until) == std::cv_status::timeout && wait_until == deadline) {
      release_due_locked(Lane::data);
      rethrow_locked(lock, Lane::data);
      return !data_.messages.empty();
    }
  }
}

bool Inbox::ready(Clock::time_point deadline) const { return ready_until(deadline, std::nullopt); }

bool Inbox::ready(Clock::time_point deadline, std::uint64_t ticket) const {
  return ready_until(deadline, ticket);
}

bool Inbox::ready_until(Clock::time_point deadline, std::optional<std::uint64_t> ticket) const {
  std::unique_lock lock(mutex_);
  auto ready_now = [&] {
    return !data_.messages.empty() || !data_.errors.empty() || (ticket && data_wakes_ != *ticket);
  };
  for (;;) {
    const auto next = release_due_locked(Lane::data);
    if (ready_now()) return true;
    const auto wait_until = until(deadline, next);
    if (data_changed_.wait_until(lock, wait_until) == std::cv_status::timeout && wait_until == deadline) {
      release_due_locked(Lane::data);
      return ready_now();
    }
  }
}

std::uint64_t Inbox::wakes(Lane lane) const {
  std::lock_guard lock(mutex_);
  return wakes_of(lane);
}

void Inbox::wake(Lane lane) {
  {
    std::lock_guard lock(mutex_);
    ++(lane == Lane::data ? data_wakes_ : control_wakes_);
  }
  changed(lane).notify_all();
}

std::size_t Inbox::size(Lane lane) const {
  std::lock_guard lock(mutex_);
  release_due_locked(lane);
  return queue(lane).messages.size();
}

std::uint64_t Inbox::control_overflow() const {
  std::lock_guard lock(mutex_);
  return control_overflow_;
}

}  // namespace hearsay::transport
