#include "gossip/network/transport/inbox.hpp"

#include <algorithm>

namespace hearsay::transport {

bool is_control(wire::MessageType t) {
  switch (t) {
    case wire::MessageType::hello:
    case wire::MessageType::welcome:
    case wire::MessageType::members:
    case wire::MessageType::bye:
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
  {
    std::lock_guard lock(mutex_);
    const bool control = is_control(message.type());
    Queue& q = queue(control ? Lane::control : Lane::data);
    q.bytes += message.payload().size();
    q.messages.push_back(std::move(message));
    if (control) {
      while (q.messages.size() > 1 &&
             (q.messages.size() > limits_.max_control_messages || q.bytes > limits_.max_bytes)) {
        q.bytes -= q.messages.front().payload().size();
        q.messages.pop_front();
        ++control_overflow_;
      }
    }
  }
  // Only the lane's own readers: the training side's stream of parameter messages must
  // not wake the membership and state threads that wait for control messages.
  changed(is_control(message.type()) ? Lane::control : Lane::data).notify_all();
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
    if (changed(lane).wait_until(lock, deadline) == std::cv_status::timeout) {
      // One last look: the deadline may have passed while a message was being queued.
      rethrow_locked(lock, lane);
      if (pred ? std::none_of(q.messages.begin(), q.messages.end(), pred) : q.messages.empty())
        return std::nullopt;
    }
  }
}

bool Inbox::wait(Clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  for (;;) {
    rethrow_locked(lock, Lane::data);
    if (!data_.messages.empty()) return true;
    if (data_changed_.wait_until(lock, deadline) == std::cv_status::timeout) {
      rethrow_locked(lock, Lane::data);
      return !data_.messages.empty();
    }
  }
}

bool Inbox::ready(Clock::time_point deadline) const {
  std::unique_lock lock(mutex_);
  return data_changed_.wait_until(lock, deadline,
                                  [&] { return !data_.messages.empty() || !data_.errors.empty(); });
}

bool Inbox::ready(Clock::time_point deadline, std::uint64_t ticket) const {
  std::unique_lock lock(mutex_);
  return data_changed_.wait_until(lock, deadline, [&] {
    return !data_.messages.empty() || !data_.errors.empty() || data_wakes_ != ticket;
  });
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
  return (lane == Lane::data ? data_ : control_).messages.size();
}

std::uint64_t Inbox::control_overflow() const {
  std::lock_guard lock(mutex_);
  return control_overflow_;
}

}  // namespace hearsay::transport
