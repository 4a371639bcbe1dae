// The delay line of link emulation (emulated_transport.hpp): latency, bandwidth and loss
// of a transport's outgoing messages, so that many peers on one machine behave like peers
// behind slower links.
//
// The model is a sender-side delay line. Each transport has one FIFO uplink at its own
// access link's rate, and a path to each destination d at the rate of the link to d,
// LinkSpec::between(self, d's own access link): the slower rate, the longer delay, both
// losses. A message of B bytes (header and payload frames) to d departs at max(now,
// uplink free) and holds the uplink for B at our own rate; it holds d's path, from the
// same departure or when the path is free, whichever is later, for B at the path's rate;
// and it is released (handed to the wrapped transport) once both are done, plus the path's
// one-way delay. Releases to one destination are therefore in send order. A message to a
// slow peer takes as long as before but keeps only its own path busy: what we send to
// fast peers meanwhile goes at our own rate, as a real NIC carries other flows while one
// crawls behind a slow peer's link. (Holding the uplink for the slow path made one slow
// peer slow everyone who talked to it: a run with one 100 Mbit peer among unlimited ones
// mixed 40% less and ended 3.6 points under its healthy twin.)
//
// Loss is drawn per message from a counter-based generator keyed by (seed, this
// transport's id, d's id) and the message's index among those to d, so the same seed
// and the same sequence of sends lose the same messages, whatever the timing. A lost
// message still holds the uplink: it was sent, then lost on the way. Duplication and
// reordering are drawn the same way, each from a key of its own: a duplicated message is
// released twice at the same time (the copy takes no uplink time of its own), a reordered
// one LinkSpec::kReorderHold after its time, so later messages to d overtake it. A lost
// message is neither.
//
// Nothing here is thread-safe: EmulatedTransport guards it with its lock.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/fiber.hpp"
#include "gossip/network/emulation/link_spec.hpp"

namespace hearsay::emulation {

// What a transport emulates (EmulationOptions::links).
struct LinkEmulation {
  LinkSpec self;                                    // this peer's own access link
  LinkSpec others;                                  // the access link of peers not listed in `peers`
  std::unordered_map<std::string, LinkSpec> peers;  // by peer id, where a peer's link differs
  std::uint64_t seed = 0;                           // of the loss draws

  // Whether there is anything to emulate at all.
  bool enabled() const noexcept;
  // The link a message to `peer` crosses.
  LinkSpec link_to(const std::string& peer) const;
};

// One line for the log: "own link 1gbit,1ms; others unlimited,0s; peer 'b' 1mbit,20ms;
// loss seed 7".
std::string describe(const LinkEmulation& emulation);

// The timing and loss of one transport's outgoing messages, without the messages.
class LinkSchedule {
 public:
  using Clock = hearsay::fiber::Clock;  // virtual time on a fiber::Scheduler's thread

  // Per destination; its address stays valid for the schedule's lifetime.
  struct Destination {
    LinkSpec link;
    Clock::duration delay{};
    std::uint64_t loss_key = 0;  // keys the loss draws of this destination (dup and reorder: derived)
    std::uint64_t sent = 0;      // messages scheduled so far (the next one's index)
    std::size_t queued = 0;      // messages waiting for their release (kept by the caller)
    Clock::time_point path_free{};  // when the path to it is free again
  };
  struct Slot {
    Destination* destination = nullptr;
    Clock::time_point release;  // when the message reaches the other side's way in
    std::uint64_t index = 0;    // its position among the messages to this destination
    bool lost = false;
    bool duplicated = false;  // released twice
    bool reordered = false;   // held back (release includes the hold)
  };
  // What push_timed says of a message that was not lost.
  struct Sent {
    Clock::time_point release;
    int copies = 1;  // 2 when duplicated
    bool reordered = false;
  };

  LinkSchedule(LinkEmulation emulation, std::string_view self_id);
  // Takes the uplink for a message of `bytes` to `peer` given at `now`.
  Slot take(const std::string& peer, std::uint64_t bytes, Clock::time_point now);
  Destination& destination(const std::string& peer);
  // Changes this transport's own access link from now on: every destination's link is
  // worked out again (what is already on its way keeps its time; loss draws go on counting).
  void set_self(const LinkSpec& self);
  const LinkSpec& self() const noexcept { return emulation_.self; }
  // When the uplink is free again (the epoch before the first message).
  Clock::time_point uplink_free() const noexcept { return uplink_free_; }
  // Whether message `index` to a destination with `loss_key` is lost at probability p.
  static bool draw_lost(std::uint64_t loss_key, std::uint64_t index, double p) noexcept;
  // The keys of the duplication and reordering draws, from a destination's loss key.
  static std::uint64_t dup_key(std::uint64_t loss_key) noexcept;
  static std::uint64_t reorder_key(std::uint64_t loss_key) noexcept;

 private:
  LinkEmulation emulation_;
  std::uint64_t self_key_;
  std::unordered_map<std::string, Destination> destinations_;
  Clock::time_point uplink_free_{};
};

// The delay line: messages (Item) held until their release time. Item is the
// decorator's outgoing message (tests use anything movable; a duplicated message of a
// type that cannot be copied is released once); a lost item is destroyed in push(), a
// released one is handed to pop_due's callback.
template <class Item>
class LinkEmulator {
 public:
  using Clock = LinkSchedule::Clock;

  LinkEmulator(LinkEmulation emulation, std::string_view self_id)
      : schedule_(std::move(emulation), self_id) {}

  // Puts a message of `bytes` to `peer`, given at `now`, on the uplink. False when it
  // was lost (the item is released here, before push returns).
  bool push(const std::string& peer, std::uint64_t bytes, Item item, Clock::time_point now) {
    return push_timed(peer, bytes, std::move(item), now).has_value();
  }
  // As push(), and says when the message is released and how (none: it was lost).
  using Sent = LinkSchedule::Sent;
  std::optional<Sent> push_timed(const std::string& peer, std::uint64_t bytes, Item item,
                                 Clock::time_point now) {
    const LinkSchedule::Slot slot = schedule_.take(peer, bytes, now);
    if (slot.lost) return std::nullopt;
    Sent sent{slot.release, 1, slot.reordered};
    if constexpr (std::is_copy_constructible_v<Item>) {
      if (slot.duplicated) {
        hold(slot, Item(item));
        sent.copies = 2;
      }
    }
    hold(slot, std::move(item));
    return sent;
  }

  // Calls handle(item) for each message whose release time is not after `now`, in
  // release order (send order among equal times). The items are gone afterwards.
  template <class Handle>
  void pop_due(Clock::time_point now, Handle&& handle) {
    while (!pending_.empty() && pending_.front().release <= now) {
      std::pop_heap(pending_.begin(), pending_.end(), later);
      Pending due = std::move(pending_.back());
      pending_.pop_back();
      --due.destination->queued;
      handle(due.item);
    }
  }

  // The earliest release time of a waiting message.
  std::optional<Clock::time_point> next_due() const {
    if (pending_.empty()) return std::nullopt;
    return pending_.front().release;
  }
  // Messages to `peer` waiting for their release.
  std::size_t queued(const std::string& peer) { return schedule_.destination(peer).queued; }
  std::size_t size() const noexcept { return pending_.size(); }
  bool empty() const noexcept { return pending_.empty(); }
  // Drops every waiting message.
  void clear() {
    for (auto& p : pending_) p.destination->queued = 0;
    pending_.clear();
  }
  LinkSchedule& schedule() noexcept { return schedule_; }

 private:
  struct Pending {
    Clock::time_point release;
    std::uint64_t sequence;
    LinkSchedule::Destination* destination;
    Item item;
  };
  void hold(const LinkSchedule::Slot& slot, Item item) {
    ++slot.destination->queued;
    pending_.push_back(Pending{slot.release, next_sequence_++, slot.destination, std::move(item)});
    std::push_heap(pending_.begin(), pending_.end(), later);
  }
  // The heap's order: the earliest release first, then the earliest given.
  static bool later(const Pending& a, const Pending& b) {
    return a.release != b.release ? a.release > b.release : a.sequence > b.sequence;
  }

  LinkSchedule schedule_;
  std::vector<Pending> pending_;  // a binary heap by `later`
  std::uint64_t next_sequence_ = 0;
};

}  // namespace hearsay::emulation
