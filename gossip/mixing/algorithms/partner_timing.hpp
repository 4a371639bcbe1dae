// What a pairwise exchange knows about its partners' timing: the round trips they took,
// the deadlines learnt from them (learnt_timeout.hpp), and which partners are left out
// of partner choices for now (they broke, or let a request expire) and until when.
//
// Used from the thread that drives the algorithm only. What is known lives in a
// PartnerMemory, by peer id, which a peer's successive algorithms share
// (AlgorithmOptions::partner_memory), so that an algorithm built anew does not relearn, a
// round timeout per round, what the last one knew (that a partner died, or how long
// replies take). Ranks are those of the PeerSet it is given, which may change between
// rounds (PairwiseExchange::set_peers): it is read at every call.
#pragma once
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/rng.hpp"
#include "gossip/mixing/algorithms/algorithm.hpp"
#include "gossip/mixing/algorithms/learnt_timeout.hpp"

namespace hearsay::algorithms {

struct PartnerMemory {
  struct Exclusion {
    Clock::time_point until{};
    int strikes = 0;
  };
  RecentDurations all{32};                                    // every partner's round trips
  std::map<std::string, RecentDurations, std::less<>> by_id;  // each partner's own (8 kept)
  std::map<std::string, Exclusion, std::less<>> excluded;     // partners left out, and until when
};

class PartnerTiming {
 public:
  // A peer that broke (PeerError) is left out for this many expiry horizons; one whose
  // request expired for one horizon per consecutive expiry, up to the same bound.
  static constexpr int kRetryStrikes = 10;
  // Requests are given up after at most this many round timeouts (the cap of the expiry).
  static constexpr int kExpiryCapRounds = 10;

  // `algorithm` names the algorithm in log lines; ranks are 0..peers-1. `memory` is what
  // an earlier algorithm of this peer learnt (null: start from nothing).
  PartnerTiming(const PeerSet& peers, Clock::duration round_timeout, std::string_view algorithm,
                std::shared_ptr<PartnerMemory> memory = nullptr);

  // A reply (or a busy refusal) from rank came `rtt` after its request left.
  void round_trip(int rank, Clock::duration rtt);
  // How long a round waits for its replies: 3x the median round trip of recent
  // exchanges (at least 2 ms), at most the round timeout and the compute bound of
  // within_compute (compute zero: unknown, no bound); the round timeout, unbounded, while
  // fewer than 4 round trips are known (learnt_wait).
  Clock::duration reply_wait(Clock::duration compute) const;
  // Whether waiting `wait` for rank's reply is time lost: at least 4 of its round trips
  // are known, their lower quartile is longer than `wait` (the reply will miss it) and
  // their upper quartile no longer than `compute` (it will be there when the next round
  // starts, waited for or not). Over a 20 ms link with 60 ms steps a compressed exchange's
  // 40 ms round trip missed gossip's 30 ms wait, and every round waited it out for
  // nothing. A reply slower than a step is still waited for: the wait then stretches the
  // step so that the next round finds the exchange settled (f32 over those links, 120 ms:
  // skipping the wait left a third fewer exchanges and ended 0.9 point lower).
  bool wait_is_lost(int rank, Clock::duration wait, Clock::duration compute) const;
  // When a request to rank is given up: 4x the 90th percentile of rank's recent round
  // trips (everyone's, while rank has fewer than 4), at least 100 ms, at most
  // kExpiryCapRounds round timeouts; one round timeout while nothing is known.
  Clock::duration expiry(int rank) const;
  // The expiry while nothing is learnt, at most `guess` (default: the round timeout). For
  // a peer that starts requests without having timed any (a passive AD-PSGD peer reaching
  // out): the round timeout kept its one request, and so its snapshot, open that long.
  void bound_first_expiry(Clock::duration guess) { first_guess_ = guess; }

  // Rank was heard from: it is back in partner choices at once.
  void heard_from(int rank);
  // Rank broke (`left`: it said bye, which is no news worth a warning).
  void leave_out_broken(int rank, std::string_view why, bool left);
  // A request to rank expired unanswered.
  void leave_out_slow(int rank);
  // The candidates (ranks) that are not currently left out, in the given order.
  std::vector<int> live(const std::vector<int>& candidates) const;
  // Up to k distinct ranks of `candidates`, drawn without replacement. A partner whose
  // median round trip is at most twice the median of all is as likely as any; a slower
  // one in proportion to its speed (one ten times slower than the typical partner is
  // asked a fifth as often): each request to it keeps our snapshot open that long, during
  // which we start nothing and answer few (pairwise.hpp). Partners not timed yet count
  // as typical. It still takes part through its own requests. The typical round trip is
  // taken as at least floor_typical's (default 0).
  static constexpr Clock::duration kTypicalFloor = std::chrono::milliseconds(1);
  std::vector<int> choose(std::vector<int> candidates, std::size_t k, Rng& rng) const;
  // The least typical round trip choose() weighs partners against. Where the others
  // answer at once (round trips of 0: virtual time, no link emulated for them) a typical
  // round trip of 0 turns the rule off, and gossip peers kept asking a 100 Mbit/s partner
  // (kTypicalFloor fixes that). Not for AD-PSGD: a passive peer is mixed only when the
  // active ones ask it, and one asked less often drifts (soak seed 25: 3 points).
  void floor_typical(Clock::duration floor) { typical_floor_ = floor; }

 private:
  // Rank's own round trips (null: none known yet).
  const RecentDurations* own(int rank) const;

  const PeerSet& peers_;
  Clock::duration round_timeout_;
  Clock::duration first_guess_ = Clock::duration::max();
  Clock::duration typical_floor_ = Clock::duration::zero();
  std::string algorithm_;
  std::shared_ptr<PartnerMemory> memory_;
};

}  // namespace hearsay::algorithms
