#include "gossip/mixing/algorithms/learnt_timeout.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace hearsay::algorithms {

RecentDurations::RecentDurations(std::size_t capacity) : ring_(capacity) {
  if (capacity == 0) throw std::invalid_argument("RecentDurations: the capacity must be at least 1");
}

void RecentDurations::add(LearntClock::duration d) {
  ring_[next_] = std::max(d, LearntClock::duration::zero());
  next_ = (next_ + 1) % ring_.size();
  count_ = std::min(count_ + 1, ring_.size());
}

LearntClock::duration RecentDurations::quantile(double q) const {
  if (count_ == 0) return LearntClock::duration::zero();
  std::vector<LearntClock::duration> kept(ring_.begin(), ring_.begin() + static_cast<std::ptrdiff_t>(count_));
  const double clamped = std::clamp(q, 0.0, 1.0);
  // Nearest rank: the smallest value with at least q of the values at or below it.
  const auto rank = static_cast<std::size_t>(std::ceil(clamped * static_cast<double>(count_)));
  const std::size_t index = rank == 0 ? 0 : rank - 1;
  std::nth_element(kept.begin(), kept.begin() + static_cast<std::ptrdiff_t>(index), kept.end());
  return kept[index];
}

LearntClock::duration learnt_timeout(const RecentDurations& recent, const TimeoutRule& rule,
                                     LearntClock::duration cap) {
  if (recent.size() < rule.min_samples || rule.floor >= cap) return cap;
  const auto scaled =
      std::chrono::duration_cast<LearntClock::duration>(std::chrono::duration<double, LearntClock::period>(
          static_cast<double>(recent.quantile(rule.quantile).count()) * rule.multiple));
  return std::clamp(scaled, rule.floor, cap);
}

LearntClock::duration within_compute(LearntClock::duration timeout, LearntClock::duration compute) {
  if (compute <= LearntClock::duration::zero()) return timeout;
  return std::min(timeout, std::max<LearntClock::duration>(compute / 2, kAlwaysWait));
}

LearntClock::duration learnt_wait(const RecentDurations& recent, const TimeoutRule& rule,
                                  LearntClock::duration cap, LearntClock::duration compute) {
  return within_compute(learnt_timeout(recent, rule, cap), compute);
}

}  // namespace hearsay::algorithms
