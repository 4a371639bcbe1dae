#include "gossip/network/transport/progress_estimate.hpp"

#include <algorithm>
#include <stdexcept>

namespace hearsay::transport {

ProgressEstimate::ProgressEstimate(int world) : world_(world) {
  if (world < 1) throw std::invalid_argument("ProgressEstimate: the world has at least this peer");
}

void ProgressEstimate::set_own(std::uint64_t steps) {
  std::lock_guard lock(mutex_);
  own_ = steps;
}

std::uint64_t ProgressEstimate::own() const {
  std::lock_guard lock(mutex_);
  return own_;
}

void ProgressEstimate::heard(const std::string& peer, std::uint64_t steps, Clock::time_point at) {
  if (steps == 0) return;
  std::lock_guard lock(mutex_);
  Peer& p = peers_[peer];
  if (p.gone && steps <= p.steps) return;  // sent before it left
  if (p.gone) p.gone = false;              // back (a restart under the same id), and trained on
  if (p.steps > 0 && steps > p.steps && at > p.at) {
    const double rate =
        static_cast<double>(steps - p.steps) / std::chrono::duration<double>(at - p.at).count();
    // A moving average: one late message should not swing the estimate.
    p.rate = p.rate == 0 ? rate : 0.7 * p.rate + 0.3 * rate;
  }
  if (steps >= p.steps || at > p.at + kHorizon) {  // a count lower than one heard is a reordered message
    p.steps = steps;
    p.at = at;
  }
}

void ProgressEstimate::left(const std::string& peer, std::uint64_t steps) {
  std::lock_guard lock(mutex_);
  auto it = peers_.find(peer);
  if (it == peers_.end() && steps == 0) return;
  Peer& p = it != peers_.end() ? it->second : peers_[peer];
  p.steps = std::max(p.steps, steps);
  p.gone = true;
}

bool ProgressEstimate::has_left(const std::string& peer) const {
  std::lock_guard lock(mutex_);
  const auto it = peers_.find(peer);
  return it != peers_.end() && it->second.gone;
}

double ProgressEstimate::estimated(const Peer& p, Clock::time_point now) {
  double steps = static_cast<double>(p.steps);
  if (!p.gone && p.rate > 0 && now > p.at) {
    // At most kHorizonSteps of its own steps past its last count (but kMinHorizon at least,
    // and kHorizon at most): a lockstep peer cut off by a partition took its neighbours to
    // go on at their old pace for ten seconds, a whole short run.
    const double horizon_s =
        std::min(std::chrono::duration<double>(kHorizon).count(),
                 std::max(std::chrono::duration<double>(kMinHorizon).count(), kHorizonSteps / p.rate));
    steps += p.rate * std::min(std::chrono::duration<double>(now - p.at).count(), horizon_s);
  }
  return steps;
}

std::optional<double> ProgressEstimate::median_other(Clock::time_point now) const {
  std::lock_guard lock(mutex_);
  std::vector<double> steps;
  for (const auto& [id, p] : peers_)
    if (!p.gone) steps.push_back(estimated(p, now));
  if (steps.empty()) return std::nullopt;
  const auto mid = steps.begin() + static_cast<std::ptrdiff_t>(steps.size() / 2);
  std::nth_element(steps.begin(), mid, steps.end());
  return *mid;
}

double ProgressEstimate::total_steps(Clock::time_point now) const {
  std::lock_guard lock(mutex_);
  double total = static_cast<double>(own_);
  int counted = 1;
  for (const auto& [id, p] : peers_) {
    total += estimated(p, now);
    ++counted;
  }
  // Peers never heard from (or more than the world: a departed id's successor) at our pace.
  if (counted < world_) total += static_cast<double>(world_ - counted) * static_cast<double>(own_);
  return total;
}

}  // namespace hearsay::transport
