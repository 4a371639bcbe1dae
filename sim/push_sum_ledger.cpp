#include "sim/push_sum_ledger.hpp"

#include "gossip/mixing/algorithms/sgp.hpp"

namespace hearsay::sim {

std::optional<PushSumLedger> push_sum_ledger(const algorithms::Algorithm& algorithm, int world) {
  const auto* sgp = dynamic_cast<const algorithms::Sgp*>(&algorithm);
  if (sgp == nullptr) return std::nullopt;
  PushSumLedger l;
  l.held = sgp->weight();
  for (int r = 0; r < world; ++r) {
    l.held += sgp->pending_weight(r);
    if (const auto share = sgp->outstanding(r)) l.outstanding.push_back({r, share->seq, share->weight});
    l.last_applied.push_back(sgp->last_applied(r));
  }
  return l;
}

double network_weight(const std::vector<const PushSumLedger*>& by_rank) {
  double w = 0;
  for (std::size_t sender = 0; sender < by_rank.size(); ++sender) {
    const PushSumLedger* l = by_rank[sender];
    if (l == nullptr) continue;
    w += l->held;
    for (const PushSumLedger::Share& s : l->outstanding) {
      const auto to = static_cast<std::size_t>(s.to);
      const PushSumLedger* receiver = to < by_rank.size() ? by_rank[to] : nullptr;
      const bool applied = receiver != nullptr && sender < receiver->last_applied.size() &&
                           receiver->last_applied[sender] >= s.seq;
      if (!applied) w += s.weight;
    }
  }
  return w;
}

}  // namespace hearsay::sim
