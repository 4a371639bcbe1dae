#include "gossip/mixing/algorithms/partner_timing.hpp"

#include <algorithm>

#include "base/log.hpp"

namespace hearsay::algorithms {

namespace {

using std::chrono::milliseconds;

// Scheduling on a busy machine delays a reply by milliseconds; below these floors a
// deadline would measure the scheduler, not the partner.
constexpr TimeoutRule kReplyWaitRule{0.5, 3.0, milliseconds(2), 4};
constexpr TimeoutRule kExpiryRule{0.9, 4.0, milliseconds(100), 4};

}  // namespace

PartnerTiming::PartnerTiming(const PeerSet& peers, Clock::duration round_timeout, std::string_view algorithm,
                             std::shared_ptr<PartnerMemory> memory)
    : peers_(peers),
      round_timeout_(round_timeout),
      algorithm_(algorithm),
      memory_(memory ? std::move(memory) : std::make_shared<PartnerMemory>()) {}

const RecentDurations* PartnerTiming::own(int rank) const {
  const auto it = memory_->by_id.find(peers_.id_of(rank));
  return it == memory_->by_id.end() ? nullptr : &it->second;
}

void PartnerTiming::round_trip(int rank, Clock::duration rtt) {
  memory_->all.add(rtt);
  memory_->by_id.try_emplace(peers_.id_of(rank), 8).first->second.add(rtt);
}

Clock::duration PartnerTiming::reply_wait(Clock::duration compute) const {
  return learnt_wait(memory_->all, kReplyWaitRule, round_timeout_, compute);
}

bool PartnerTiming::wait_is_lost(int rank, Clock::duration wait, Clock::duration compute) const {
  const RecentDurations* mine = own(rank);
  return mine && mine->size() >= kReplyWaitRule.min_samples && mine->quantile(0.25) > wait &&
         mine->quantile(0.75) <= compute;
}

Clock::duration PartnerTiming::expiry(int rank) const {
  const RecentDurations* mine = own(rank);
  // A partner not heard from enough yet is taken to be like the others.
  const RecentDurations& basis = mine && mine->size() >= kExpiryRule.min_samples ? *mine : memory_->all;
  // Before anything is learnt the round timeout is the best guess of how long a reply
  // may take (the user set it as the longest a round may wait), unless the algorithm
  // bounded it (bound_first_expiry). A reply after that still teaches the round trip.
  if (basis.size() < kExpiryRule.min_samples) return std::min(round_timeout_, first_guess_);
  return learnt_timeout(basis, kExpiryRule, kExpiryCapRounds * round_timeout_);
}

void PartnerTiming::heard_from(int rank) { memory_->excluded.erase(peers_.id_of(rank)); }

void PartnerTiming::leave_out_broken(int rank, std::string_view why, bool left) {
  PartnerMemory::Exclusion& ex = memory_->excluded[peers_.id_of(rank)];
  const bool first = ex.strikes < kRetryStrikes;
  ex.strikes = kRetryStrikes;
  const Clock::duration away = kRetryStrikes * std::max(expiry(rank), round_timeout_);
  ex.until = Clock::now() + away;
  const std::string line = algorithm_ + ": leaving peer '" + peers_.id_of(rank) + "' out for " +
                           std::to_string(std::chrono::duration_cast<milliseconds>(away).count()) +
                           " ms, then retrying it: " + std::string(why);
  // A peer that said bye is no news worth a warning.
  if (first && !left)
    logging::warn(line);
  else
    logging::debug(line);
}

void PartnerTiming::leave_out_slow(int rank) {
  PartnerMemory::Exclusion& ex = memory_->excluded[peers_.id_of(rank)];
  ex.strikes = std::min(ex.strikes + 1, kRetryStrikes);
  const Clock::duration away = ex.strikes * expiry(rank);
  ex.until = Clock::now() + away;
  logging::debug(algorithm_ + ": peer '" + peers_.id_of(rank) +
                 "' let a request expire; leaving it out for " +
                 std::to_string(std::chrono::duration_cast<milliseconds>(away).count()) + " ms");
}

std::vector<int> PartnerTiming::live(const std::vector<int>& candidates) const {
  const auto now = Clock::now();
  std::vector<int> out;
  for (const int rank : candidates) {
    if (rank == peers_.self || rank < 0 || rank >= peers_.size()) continue;
    const auto it = memory_->excluded.find(peers_.id_of(rank));
    if (it == memory_->excluded.end() || it->second.until <= now) out.push_back(rank);
  }
  return out;
}

}  // namespace hearsay::algorithms

namespace hearsay::algorithms {

std::vector<int> PartnerTiming::choose(std::vector<int> candidates, std::size_t k, Rng& rng) const {
  const double typical = static_cast<double>(std::max(memory_->all.quantile(0.5), typical_floor_).count());
  std::vector<double> weight(candidates.size(), 1.0);
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const RecentDurations* mine = own(candidates[i]);
    if (!mine || mine->size() == 0) continue;
    const double rtt = static_cast<double>(mine->quantile(0.5).count());
    if (typical > 0 && rtt > 2 * typical) weight[i] = 2 * typical / rtt;
  }
  std::vector<int> chosen;
  while (chosen.size() < k && !candidates.empty()) {
    double total = 0;
    for (const double w : weight) total += w;
    double u = rng.uniform() * total;
    std::size_t pick = 0;
    while (pick + 1 < candidates.size() && u >= weight[pick]) u -= weight[pick++];
    chosen.push_back(candidates[pick]);
    candidates.erase(candidates.begin() + static_cast<std::ptrdiff_t>(pick));
    weight.erase(weight.begin() + static_cast<std::ptrdiff_t>(pick));
  }
  return chosen;
}

}  // namespace hearsay::algorithms
