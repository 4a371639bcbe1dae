// What must hold of every run with faults (--faults or --chaos), whatever the schedule: the
// checks that tell a run that survived its faults from one that hung, lost state, went
// non-finite, or reported something that did not happen. A violated invariant makes
// `hearsay sim` exit 1 with the first violation (and the seed, under --chaos). Under
// --chaos the exit status is the invariants' alone: an all-reduce that stops on a lost
// peer, naming it, is what it must do.
//
//   ends          the run ended by itself: no timeout, no fiber left waiting (virtual)
//   finite        every evaluation's loss and accuracy is a number; no peer's loss or
//                 parameters became NaN or infinite
//   faults        every fault of the schedule is reported, fired or not; a fired one at a
//                 time within the run, healed (partition, freeze) no earlier than it fired;
//                 one that did not fire is named in the status
//   status        "ok", "diverged: " saying where, or "failed: " naming the peer — and
//                 "failed" only for an algorithm that cannot survive a peer it lost
//                 (all-reduce); the gossip family must train on
//   checkpoints   every peer that finished wrote a checkpoint its own reader loads, and
//                 every checkpoint file seen on disk while the run went was complete
//                 (process engine; a virtual peer keeps its checkpoints in memory)
//   weight        push-sum (sgp, virtual engine): the network's weight at the end is the
//                 number of peers, to rounding, when no peer died; with deaths it is above
//                 0 and at most the peers plus one per restart (push_sum_ledger.hpp).
//                 Not checked (shown as "-") for other runs.
#pragma once
#include <string>
#include <vector>

#include "sim/fault_spec.hpp"

namespace hearsay::sim {

struct RunResult;

struct InvariantCheck {
  std::string name;  // ends, finite, faults, status, checkpoints, weight
  bool held = true;
  std::string detail;   // why not, when not
  bool checked = true;  // false: it does not apply to this run (held stays true)

  bool operator==(const InvariantCheck&) const = default;
};

// Checks run `r` of a schedule of `faults`; one entry per invariant, in the order above.
std::vector<InvariantCheck> check_invariants(const RunResult& r, const std::vector<Fault>& faults);

// The first violated invariant, as one line ("status: gossip run 0 ended 'failed: ...'"),
// or "" when all held.
std::string first_violation(const RunResult& r);

}  // namespace hearsay::sim
