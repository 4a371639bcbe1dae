// What `hearsay watch` makes of the peers' /status replies: each reply read (leniently: a
// field an older peer lacks stays empty), each peer followed from poll to poll (its step
// rate, since when it has been silent and why), and what the answering peers' member lists
// say about each member, so that a killed peer shows both "no answer" and "dead per 3".
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "peer/http_client.hpp"

namespace hearsay::watch {

using Clock = std::chrono::steady_clock;

struct Member {
  std::string id;
  std::string address;
  std::string state;  // alive, suspect, dead
  bool left = false;  // dead because it said bye
  bool self = false;
};

// One /status reply. Numbers an older peer does not send stay unset.
struct PeerStatus {
  std::string run;
  std::string peer;   // metrics.peer, the member id ("rank3")
  std::string state;  // joining, waiting, held, training, paused, ending; "" from older peers
  std::optional<double> epochs, test_acc, test_loss;
  std::optional<double> time_s, loss, train_acc, samples_per_s, partner_distance;
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
  std::uint64_t dropped = 0;  // every reason together
  std::vector<Member> members;
};

// A /status body read, or std::nullopt with `error` saying why ("bad reply: not JSON", ...).
std::optional<PeerStatus> parse_status(std::string_view body, std::string& error);

// One watched peer, poll after poll.
class PeerTrack {
 public:
  // The result of this poll at `now`.
  void update(const HttpReply& reply, Clock::time_point now);

  bool answering() const { return answering_; }
  bool ever_answered() const { return last_.has_value(); }
  const std::optional<PeerStatus>& last() const { return last_; }  // the last good reply
  const std::string& error() const { return error_; }              // this poll's failure
  bool bad_reply() const { return bad_reply_; }                    // it answered, but not with a /status
  std::optional<double> step_rate() const { return step_rate_; }
  // Since the last good reply (or since the first poll, when none came yet).
  double silent_s(Clock::time_point now) const;

 private:
  std::optional<PeerStatus> last_;
  std::optional<Clock::time_point> since_;  // the last good reply, or the first poll
  bool answering_ = false;
  bool bad_reply_ = false;
  std::string error_;
  std::optional<double> step_rate_;
};

// How many answering peers list a member in each state (its own entry not counted).
struct Verdict {
  int alive = 0;
  int suspect = 0;
  int dead = 0;  // dead without a bye: silent past --dead-after
  int left = 0;  // said bye
};
std::map<std::string, Verdict> verdicts(const std::vector<const PeerTrack*>& tracks);

// The verdict in words: "dead per 3 peers", "dead per 1, suspect per 2 peers", "said bye
// per 3 peers"; `with_alive` adds "alive per N" (for a peer that does not answer us).
std::string verdict_text(const Verdict& v, bool with_alive);

// The STATE column: the peer's own state while it answers; otherwise "no answer", "bad
// reply", or "ended" when it said bye (per the others) or was last seen ending.
std::string derive_state(const PeerTrack& track, const Verdict* verdict);

// Live members other than the peer itself, and all the others it knows of.
struct Partners {
  int alive = 0;
  int known = 0;
};
Partners partners_of(const PeerStatus& status);

}  // namespace hearsay::watch
