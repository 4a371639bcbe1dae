#include "sim/push_sum_ledger.hpp"

#include "gossip/mixing/algorithms/sgp.hpp"

namespace hearsay::sim {

bool PushSumLedger::applied_share(int sender, std::uint64_t sender_session, const Share& share) const {
  const auto s = static_cast<std::size_t>(sender);
  return s < applied.size() && applied[s].session == sender_session && applied[s].seq >= share.seq;
}

std::optional<PushSumLedger> push_sum_ledger(const algorithms::Algorithm& algorithm, int rank, int world) {
  const auto* sgp = dynamic_cast<const algorithms::Sgp*>(&algorithm);
  if (sgp == nullptr) return std::nullopt;
  PushSumLedger l;
  l.rank = rank;
  l.session = sgp->session();
  l.held = sgp->weight();
  for (int r = 0; r < world; ++r) {
    l.held += sgp->pending_weight(r);
    if (const auto share = sgp->outstanding(r)) l.outstanding.push_back({r, share->seq, share->weight});
    l.applied.push_back({sgp->applied_session(r), sgp->last_applied(r)});
  }
  return l;
}

double network_weight(const std::vector<const PushSumLedger*>& by_rank,
                      std::span<const PushSumLedger* const> departed) {
  double w = 0;
  for (const PushSumLedger* l : by_rank) {
    if (l == nullptr) continue;
    w += l->held;
    for (const PushSumLedger::Share& s : l->outstanding) {
      const auto to = static_cast<std::size_t>(s.to);
      const PushSumLedger* receiver = to < by_rank.size() ? by_rank[to] : nullptr;
      bool applied = receiver != nullptr && receiver->applied_share(l->rank, l->session, s);
      for (const PushSumLedger* d : departed)
        applied = applied || (d->rank == s.to && d->applied_share(l->rank, l->session, s));
      if (!applied) w += s.weight;
    }
  }
  return w;
}

}  // namespace hearsay::sim
