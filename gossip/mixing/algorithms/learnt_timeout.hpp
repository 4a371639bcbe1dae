// Deadlines learnt from what a peer observes, instead of one fixed --round-timeout.
//
// A fixed deadline is wrong both ways: on a fast link it turns every lost message into
// seconds of waiting, on a slow one it cuts off exchanges that were on their way. So the
// algorithms keep the durations they observe (round trips of a pairwise exchange, how
// long a round waited for its neighbours, the time between a share and its
// acknowledgement) and set each deadline to a multiple of a high quantile of the recent
// ones, within a floor (below which scheduling noise dominates) and a cap
// (--round-timeout, the old fixed deadline, also used until enough has been observed).
//
// Algorithms that need not wait for anyone (gossip, sgp, a passive AD-PSGD peer) also
// bound a round's wait by half the compute time of a round, or kAlwaysWait when that is
// more: waiting then adds at most half to the time of a step, whatever a partner's link
// does, while a model that computes in microseconds still waits out the round trips of
// a healthy network. The Mixer measures the compute (Algorithm::compute_per_round).
#pragma once
#include <chrono>
#include <cstddef>
#include <vector>

namespace hearsay::algorithms {

using LearntClock = std::chrono::steady_clock;

// The last `capacity` durations of one kind; older ones are forgotten, so an estimate
// follows a link that became slower or faster.
class RecentDurations {
 public:
  explicit RecentDurations(std::size_t capacity = 32);
  void add(LearntClock::duration d);
  std::size_t size() const noexcept { return count_; }
  // The q-quantile (q in [0, 1], nearest rank) of the durations kept; zero when none.
  LearntClock::duration quantile(double q) const;

 private:
  std::vector<LearntClock::duration> ring_;
  std::size_t next_ = 0, count_ = 0;
};

struct TimeoutRule {
  double quantile = 0.9;  // of the recent durations
  double multiple = 2.0;  // times that quantile
  LearntClock::duration floor = std::chrono::milliseconds(10);
  std::size_t min_samples = 4;  // fewer known: the cap
};

// clamp(multiple x quantile(recent), floor, cap), or cap while fewer than
// rule.min_samples durations are known (and when the floor is above the cap).
LearntClock::duration learnt_timeout(const RecentDurations& recent, const TimeoutRule& rule,
                                     LearntClock::duration cap);

// A wait this short is never cut by the compute bound.
inline constexpr LearntClock::duration kAlwaysWait = std::chrono::milliseconds(10);

// `timeout`, but no longer than max(compute / 2, kAlwaysWait) when compute is known
// (positive): the bound of an algorithm that need not wait for anyone.
LearntClock::duration within_compute(LearntClock::duration timeout, LearntClock::duration compute);

// How long a round of an algorithm that need not wait for anyone waits: the learnt
// timeout (the cap until it is learnt) within the compute bound. The cap alone, whatever
// the compute, until four waits were known made one lost message at the start of a run
// cost a lossy peer the round timeout (2 s), and that peer finished last; peers start
// together (the simulator's hold, --wait-for-world), and one that starts alone trains
// alone until partners answer, as gossip does whenever they are away.
LearntClock::duration learnt_wait(const RecentDurations& recent, const TimeoutRule& rule,
                                  LearntClock::duration cap, LearntClock::duration compute);

}  // namespace hearsay::algorithms
