#include "gossip/mixing/algorithms/mailbox.hpp"

#include <algorithm>

namespace hearsay::algorithms {

Mailbox::Mailbox(transport::Transport& transport, std::size_t max_held)
    : transport_(transport), max_held_(std::max<std::size_t>(max_held, 1)) {}

void Mailbox::on(wire::MessageType type, Handler handler) { handlers_[type] = std::move(handler); }

void Mailbox::hold(Message message) {
  if (held_.size() >= max_held_) {
    held_.pop_front();
    ++discarded_;
  }
  held_.push_back(std::move(message));
}

bool Mailbox::pump(transport::Deadline deadline) {
  auto message = transport_.receive(deadline);
  if (!message) return false;
  if (auto it = handlers_.find(message->type()); it != handlers_.end()) {
    it->second(*message);
  } else {
    hold(std::move(*message));
  }
  return true;
}

std::optional<transport::Message> Mailbox::wait(const Match& match, transport::Deadline deadline) {
  const auto take_held = [&]() -> std::optional<Message> {
    const auto it = std::find_if(held_.begin(), held_.end(), match);
    if (it == held_.end()) return std::nullopt;
    Message m = std::move(*it);
    held_.erase(it);
    return m;
  };
  if (auto m = take_held()) return m;
  // Only the newest held message can be new after a pump, but a handler may also
  // have changed what matches; scanning all held messages keeps this simple and the
  // held queue is short.
  while (pump(deadline)) {
    if (auto m = take_held()) return m;
  }
  return take_held();
}

void Mailbox::serve(transport::Deadline deadline) {
  while (pump(deadline)) {
  }
}

void Mailbox::for_each_held(const Handler& look) const {
  for (const auto& m : held_) look(m);
}

void Mailbox::discard_if(const Match& stale) {
  const auto before = held_.size();
  held_.erase(std::remove_if(held_.begin(), held_.end(), stale), held_.end());
  discarded_ += before - held_.size();
}

}  // namespace hearsay::algorithms
