// Push-sum's mass, counted across a virtual run's peers (the `weight` invariant of
// invariants.hpp). sgp moves weight between peers but never makes or destroys it: what a
// peer sends leaves its w and joins the receiver's when applied, and a share lost on the
// way is re-sent until acknowledged (sgp.hpp, "Mass conservation"). So the network's
// weight, counted as sgp.hpp's introspection says (every peer's w and pending shares, and
// each outstanding share its receiver has not applied), stays the number of peers, less
// what dead peers took with them and plus 1 for each restarted peer (a new push-sum
// session starts at w = 1).
//
// Each virtual peer takes its ledger when its mixer stops (its Sgp is destroyed right
// after); the run adds up those of the peers alive at the end. Shares outstanding when a
// run ends (sent to a peer that had ended) count: they are mass on its way, not lost.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

namespace hearsay::algorithms {
class Algorithm;
}

namespace hearsay::sim {

struct PushSumLedger {
  double held = 0;  // w and the weight of the pending shares
  struct Share {
    int to = -1;
    std::uint64_t seq = 0;
    double weight = 0;
  };
  std::vector<Share> outstanding;           // sent, not acknowledged
  std::vector<std::uint64_t> last_applied;  // by sender rank: its last share applied here
};

// The ledger of `algorithm` if it is push-sum (sgp), else none. Call only while it does
// not mix (after its Mixer stopped).
std::optional<PushSumLedger> push_sum_ledger(const algorithms::Algorithm& algorithm, int world);

// The network's weight: by_rank[r] is rank r's ledger, or null for a rank not alive at the
// end (its held weight died with it; shares to it that it never applied still count).
double network_weight(const std::vector<const PushSumLedger*>& by_rank);

}  // namespace hearsay::sim
