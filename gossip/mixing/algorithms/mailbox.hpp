// Sorts what the transport delivers for one algorithm: the algorithm waits for the
// messages it needs now (a type, a round, a sender), messages that arrived early (a
// neighbour already in the next round) are held until asked for, and requests from
// partners (a pull, a pairwise exchange) go to a handler as soon as they arrive, even
// while we wait for something else, so that two peers waiting on each other never
// deadlock.
//
// Used from one thread (the algorithm's). PeerErrors from the transport pass through.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>

#include "gossip/network/transport/transport.hpp"

namespace hearsay::algorithms {

class Mailbox {
 public:
  using Message = transport::Message;
  using Match = std::function<bool(const Message&)>;
  using Handler = std::function<void(const Message&)>;

  // At most max_held messages are held; beyond that the oldest is discarded (and
  // counted): a peer far ahead cannot make us keep unbounded memory.
  explicit Mailbox(transport::Transport& transport, std::size_t max_held = 256);

  // Messages of this type go to handler on arrival instead of being held.
  void on(wire::MessageType type, Handler handler);

  // The first held or newly arriving message for which match is true (removed from the
  // mailbox); nullopt when none came before the deadline. Handlers run meanwhile.
  std::optional<Message> wait(const Match& match, transport::Deadline deadline);
  // Runs handlers for arrivals until the deadline (nothing is returned).
  void serve(transport::Deadline deadline);
  // Holds a message that wait() returned after all: one the caller looked at only to
  // learn something (a neighbour's next round has begun) and will want later.
  void put_back(Message message) { hold(std::move(message)); }
  // Removes held messages for which stale is true (e.g. rounds already finished).
  void discard_if(const Match& stale);
  // Calls look at every held message, oldest first (nothing is removed).
  void for_each_held(const Handler& look) const;

  std::size_t held() const noexcept { return held_.size(); }
  std::uint64_t discarded() const noexcept { return discarded_; }

 private:
  // Takes one arrival (handler or hold); false when the deadline passed first.
  bool pump(transport::Deadline deadline);
  void hold(Message message);

  transport::Transport& transport_;
  std::size_t max_held_;
  std::deque<Message> held_;
  std::map<wire::MessageType, Handler> handlers_;
  std::uint64_t discarded_ = 0;
};

}  // namespace hearsay::algorithms
