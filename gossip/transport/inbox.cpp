#include "gossip/transport/inbox.hpp"

#include <algorithm>

namespace hearsay::transport {

void Inbox::push(Message message) {
  {
    std::lock_guard lock(mutex_);
    bytes_ += message.payload().size();
    messages_.push_back(std::move(message));
  }
  changed_.notify_all();
}

void Inbox::push_error(std::exception_ptr error) {
  {
    std::lock_guard lock(mutex_);
    errors_.push_back(std::move(error));
  }
  changed_.notify_all();
}

bool Inbox::has_room() const {
  std::lock_guard lock(mutex_);
  return has_room_locked();
}

bool Inbox::has_room_locked() const {
  return messages_.size() < limits_.max_messages && bytes_ < limits_.max_bytes;
}

void Inbox::set_on_room(std::function<void()> on_room) {
  std::lock_guard lock(mutex_);
  on_room_ = std::move(on_room);
}

void Inbox::rethrow_locked(std::unique_lock<std::mutex>& lock) {
  if (errors_.empty()) return;
  std::exception_ptr error = std::move(errors_.front());
  errors_.pop_front();
  lock.unlock();
  std::rethrow_exception(error);
}

void Inbox::rethrow_pending() {
  std::unique_lock lock(mutex_);
  rethrow_locked(lock);
}

std::optional<Message> Inbox::pop(Clock::time_point deadline,
                                  const std::function<bool(const Message&)>& pred) {
  std::unique_lock lock(mutex_);
  for (;;) {
    rethrow_locked(lock);
    auto it = pred ? std::find_if(messages_.begin(), messages_.end(), pred) : messages_.begin();
    if (it != messages_.end()) {
      const bool was_full = !has_room_locked();
      Message message = std::move(*it);
      messages_.erase(it);
      bytes_ -= message.payload().size();
      const bool room_now = was_full && has_room_locked();
      std::function<void()> on_room = room_now ? on_room_ : nullptr;
      lock.unlock();
      if (on_room) on_room();
      return message;
    }
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout) {
      // One last look: the deadline may have passed while a message was being queued.
      rethrow_locked(lock);
      if (pred ? std::none_of(messages_.begin(), messages_.end(), pred) : messages_.empty())
        return std::nullopt;
    }
  }
}

bool Inbox::wait(Clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  for (;;) {
    rethrow_locked(lock);
    if (!messages_.empty()) return true;
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout) {
      rethrow_locked(lock);
      return !messages_.empty();
    }
  }
}

bool Inbox::ready(Clock::time_point deadline) const {
  std::unique_lock lock(mutex_);
  return changed_.wait_until(lock, deadline, [&] { return !messages_.empty() || !errors_.empty(); });
}

std::size_t Inbox::size() const {
  std::lock_guard lock(mutex_);
  return messages_.size();
}

}  // namespace hearsay::transport
