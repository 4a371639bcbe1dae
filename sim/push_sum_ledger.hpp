// Push-sum's mass, counted across a virtual run's peers (the `weight` invariant of
// invariants.hpp). sgp moves weight between peers but never makes or destroys it: what a
// peer sends leaves its w and joins the receiver's when applied, and a share lost on the
// way is re-sent until acknowledged (sgp.hpp, "Mass conservation"). So the network's
// weight, counted as sgp.hpp's introspection says (every peer's w and pending shares, and
// each outstanding share no life of its receiver has applied), stays the number of peers,
// less what dead peers took with them and plus 1 for each restarted peer (a new push-sum
// session starts at w = 1).
//
// Each virtual peer takes its ledger when its mixer stops (its Sgp is destroyed right
// after); the run adds up those of the peers alive at the end, and asks those that died
// (killed, or a restarted peer's earlier life) which shares they applied: a share applied
// by a peer that died went with it, even if its sender never heard so. Shares outstanding
// when a run ends that no life of their receiver applied count: they are mass on its way
// (to a peer that had ended, or that a restart would take them to), not lost.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace hearsay::algorithms {
class Algorithm;
}

namespace hearsay::sim {

struct PushSumLedger {
  int rank = -1;
  std::uint64_t session = 0;  // the link session of the shares it sent
  double held = 0;            // w and the weight of the pending shares
  struct Share {
    int to = -1;
    std::uint64_t seq = 0;
    double weight = 0;
  };
  std::vector<Share> outstanding;  // sent, not acknowledged
  struct Applied {
    std::uint64_t session = 0;  // the sender's session
    std::uint64_t seq = 0;      // its last share applied here (0: none)
  };
  std::vector<Applied> applied;  // by sender rank

  // Whether this peer applied `share`, sent by a peer in link session `session`.
  bool applied_share(int sender, std::uint64_t session, const Share& share) const;
};

// The ledger of `algorithm` (rank `rank` of `world`) if it is push-sum (sgp), else none.
// Call only while it does not mix (after its Mixer stopped).
std::optional<PushSumLedger> push_sum_ledger(const algorithms::Algorithm& algorithm, int rank, int world);

// The network's weight: by_rank[r] is rank r's ledger, or null for a rank not alive at the
// end (its held weight died with it); departed are the ledgers of the lives that died
// (killed peers, restarted peers' earlier lives), which say which shares they applied.
double network_weight(const std::vector<const PushSumLedger*>& by_rank,
                      std::span<const PushSumLedger* const> departed = {});

}  // namespace hearsay::sim
