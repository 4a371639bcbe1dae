// Membership and failure detection: peers of a run find each other from seed
// addresses, gossip the member list, and judge each other alive, suspect or dead from
// how long they have been silent.
//
// Failure detection is gossip-style (van Renesse et al., 1998): every member raises its
// own heartbeat counter once per heartbeat interval and sends its list, its own entry
// first, to `fanout` random live members. A member's entry is (incarnation, heartbeat,
// id, address); whoever sees a larger heartbeat for it than before, first- or
// second-hand, notes the time. A member unheard of for suspect_after is suspect, for
// dead_after dead; a larger heartbeat makes it alive again (a returning peer). A larger
// incarnation (a restarted process with the same id) replaces the old entry, its
// address included. A member that says bye is dead at once (left).
//
// Joining: hello (with our address and entry) to every seed; a member answers with
// welcome and its list and connects to the joiner. A peer that knows no live member
// says hello to its seeds again every join_retry, so a seed that is not up yet, or a
// peer everyone declared dead, finds its way back.
//
// Membership runs on its own thread and reads only the transport's control messages
// (Transport::receive_control), so the algorithms' receive() is unaffected; it leaves
// state_request/state_reply to the peer process. docs/PROTOCOL.md section 4.4 is the wire
// description.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/rng.hpp"
#include "gossip/network/membership/member_list.hpp"
#include "gossip/network/transport/transport.hpp"

namespace hearsay::membership {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

enum class MemberState { alive, suspect, dead };
std::string_view to_string(MemberState state);

struct MembershipOptions {
  // Addresses (as Transport::address() gives them) of peers to join through; may be
  // empty for the first peer of a run, and may include our own address.
  std::vector<std::string> seeds;
  // Where others reach us; empty: the transport's address().
  std::string advertised_address;
  Clock::duration heartbeat = 1s;
  Clock::duration suspect_after = 5s;  // silence until suspect; more than heartbeat
  Clock::duration dead_after = 15s;    // silence until dead; more than suspect_after
  // How often a peer that knows no live member says hello to its seeds; 0: 5 heartbeats.
  Clock::duration join_retry = 0s;
  std::size_t fanout = 3;  // members gossiped to per heartbeat
  // This process's incarnation; 0: microseconds since the Unix epoch at construction,
  // which a restarted process always exceeds.
  std::uint64_t incarnation = 0;
  std::uint64_t rng_seed = 0;  // choice of gossip targets; 0: random
};

struct MemberInfo {
  std::string id;
  std::string address;
  MemberState state = MemberState::alive;
  bool left = false;  // dead because it said bye
  bool self = false;
  std::uint64_t incarnation = 0;
  std::uint64_t heartbeat = 0;
  Clock::time_point last_heard{};
};

enum class Change { joined, suspected, died, left, revived, restarted };
std::string_view to_string(Change change);
struct MemberEvent {
  Change change;
  std::string id;
  std::string address;
};

struct MembershipCounters {
  std::uint64_t received = 0;  // control messages handled
  std::uint64_t hellos = 0, welcomes = 0, member_lists = 0, byes = 0;
  std::uint64_t malformed_entries = 0;   // entries dropped from received lists
  std::uint64_t malformed_messages = 0;  // hellos without a usable address
  std::uint64_t sent = 0, send_failures = 0;
  std::uint64_t seed_attempts = 0, seed_failures = 0;
  std::uint64_t peer_errors = 0;  // PeerErrors the transport reported to membership
  std::uint64_t joins = 0, suspicions = 0, deaths = 0, departures = 0, revivals = 0, restarts = 0;
  // Heartbeats that came more than suspect_after after the one before: this process was
  // stopped (SIGSTOP, a VM migration) or starved, and the silence was its own.
  std::uint64_t own_pauses = 0;
};

// A seed's answer to our hello that we may not join (wire `refused`, PROTOCOL.md 4.4):
// who refused, their words, and their run and model, to set beside ours.
struct Refusal {
  std::string from;
  std::string why;
  std::string run_id, fingerprint;
};

class Membership {
 public:
  // Throws std::invalid_argument for options that cannot work (named in the message)
  // and for a transport id that cannot be a member id (see valid_member_id).
  Membership(transport::Transport& transport, MembershipOptions options);
  // Stops the thread (without saying bye); never throws.
  ~Membership();
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  // Called on membership's thread for every change, without membership's lock held (it
  // may call the queries below). Set it before start().
  void set_on_change(std::function<void(const MemberEvent&)> on_change);
  // Starts the background thread, which says hello to the seeds at once. Throws
  // std::logic_error when already started.
  void start();
  // Stops and joins the thread; idempotent.
  void stop() noexcept;
  // Stops the thread and sends bye to every live or suspect member.
  void leave();

  const std::string& self_id() const { return self_.id; }
  // Ids of the members judged alive, ourselves included, sorted.
  std::vector<std::string> live_members() const;
  std::optional<std::string> address_of(const std::string& id) const;
  std::optional<MemberState> state_of(const std::string& id) const;
  // Every member ever known, ourselves included, sorted by id.
  std::vector<MemberInfo> members() const;
  MembershipCounters counters() const;
  // The first refusal of our hello, if a seed refused it: its id was taken there, or it is
  // of another run or model. A joiner stops on it rather than retry.
  std::optional<Refusal> refusal() const;
  // Raised by every change: the training loop compares it with the last value it saw.
  std::uint64_t version() const { return version_.load(std::memory_order_acquire); }

 private:
  struct Member {
    std::string address;
    MemberState state = MemberState::alive;
    bool left = false;
    std::uint64_t incarnation = 0;
    std::uint64_t heartbeat = 0;
    Clock::time_point last_heard{};
  };
  using Events = std::vector<MemberEvent>;

  void run() noexcept;
  void tick(Clock::time_point now);
  void handle(const transport::Message& message, Clock::time_point now);
  // Applies an entry; `direct`: it came from the member itself.
  void observe(const Entry& entry, bool direct, Clock::time_point now, Events& events);
  // A bye from sender (own: the entry it sent of itself): it left, unless the bye is from
  // an earlier life of it. Under mutex_.
  void take_bye(const std::string& sender, const std::optional<Entry>& own, Events& events);
  void forgive_own_pause(Clock::time_point now);
  void check_timeouts(Clock::time_point now, Events& events);
  void say_hello_to_seeds();
  std::vector<std::string> list_locked() const;
  bool send(const std::string& to, wire::MessageType type, std::uint64_t nonce,
            std::vector<std::string> members, bool with_address = false, std::string* error = nullptr);
  void connect(const std::string& id, const std::string& address);
  void publish(Events& events);
  void warn_limited(const std::string& key, const std::string& message);

  transport::Transport& transport_;
  MembershipOptions options_;
  Entry self_;

  mutable std::mutex mutex_;
  std::map<std::string, Member> members_;  // others only
  std::optional<Clock::time_point> last_tick_;  // of tick(): when this thread last ran it
  MembershipCounters counters_;
  std::optional<Refusal> refusal_;
  std::function<void(const MemberEvent&)> on_change_;
  std::atomic<std::uint64_t> version_{0};

  Rng rng_;  // membership thread only
  Clock::time_point next_beat_{}, next_join_{};
  std::map<std::string, Clock::time_point> last_warned_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace hearsay::membership
