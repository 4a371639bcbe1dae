// The fault schedule of `hearsay sim --faults SPEC`: which peers die, come back, compute
// slowly, sit behind a slow link or are cut off from each other, and when.
//
// SPEC is a list of faults separated by ';' (whitespace around every token is ignored,
// empty entries are skipped):
//   kill:PEER@T                 SIGKILL the peer at T
//   restart:PEER@T              start the peer again at T with --resume (if it is still
//                               alive then, the simulator kills it first)
//   slow:PEER:Fx[@T]            the peer computes F times slower (F >= 1) from T on
//                               (from the start when @T is not given), e.g. slow:2:3x
//   link:PEER:RATE,DELAY[,loss=P][,dup=P][,reorder=P][@T[..T2]]
//                               the peer's own network link (the form of link_spec.hpp)
//                               for the whole run, e.g. link:3:1mbit,20ms,loss=0.05, or from
//                               T (until T2, or the end), e.g. link:3:1mbit,20ms@1ep..2ep. A
//                               link for the whole run holds both ways (its partners'
//                               messages to it cross it too); one with a time slows what the
//                               peer sends, from T, and heals at T2
//   partition:GROUP|GROUP[|...]@T..T2
//                               from T until T2, peers of different groups cannot talk,
//                               e.g. partition:0-3|4-7@30s..60s
//   freeze:PEER@T..T2           from T until T2 the peer's process is stopped (SIGSTOP,
//                               then SIGCONT: a VM migration, a swap storm); its partners
//                               hear nothing, then a peer that wakes with old state,
//                               e.g. freeze:2@30s..50s
//   disk-full:PEER@T[..T2]      from T (until T2, or the end) the peer's disk is full: its
//                               writes past a few hundred KB more fail (RLIMIT_FSIZE), so
//                               its checkpoints fail while its log goes on; it trains on,
//                               e.g. disk-full:1@1ep..2ep
// PEER is a rank, a non-negative integer. A GROUP is a comma-separated list of ranks and
// inclusive ranges, e.g. "0,2,4" or "1,3,5-7". At least two groups must be listed and
// no rank may be in two of them; the peers listed in no group form one more group
// together (so partition:0|1@... on four peers makes three groups: {0}, {1}, {2, 3}).
// A time T is a number with a unit: 500ms, 30s, 2m (after training starts) or
// 1.5ep (in epochs of training, as the peers count them).
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "gossip/network/emulation/link_spec.hpp"

namespace hearsay::sim {

struct FaultTime {
  enum class Unit { seconds, epochs };
  Unit unit = Unit::seconds;
  double value = 0;  // seconds (ms and m are converted) or epochs

  bool operator==(const FaultTime&) const = default;
};
// "30s", "0.5s", "1.5ep": what parse_faults reads back as the same time.
std::string to_string(const FaultTime& time);

struct Fault {
  enum class Kind { kill, restart, slow, link, partition, freeze, disk_full };
  Kind kind = Kind::kill;
  std::string text;                      // the fault as written (trimmed), for messages and the report
  int peer = -1;                         // all but partition
  FaultTime at;             // kill, restart, slow (0s when not given), partition and freeze start
  FaultTime until;          // partition, freeze, disk-full and link end
  bool to_the_end = false;  // disk-full and link without T2: it lasts to the end
  double slowdown = 1;                   // slow: F
  emulation::LinkSpec link;              // link
  std::vector<std::vector<int>> groups;  // partition: the listed groups, ranks sorted

  // A link fault with a time (@T, or @T..T2): set through the control file while the run
  // goes, not given to the peers at their start.
  bool timed_link() const { return kind == Kind::link && (at.value != 0 || !to_the_end); }
};
// "kill", "restart", "slow", "link", "partition", "freeze", "disk-full".
std::string_view to_string(Fault::Kind kind);

// Parses SPEC into its faults, in the order written. An empty spec (or only whitespace
// and stray ';') gives no faults. Throws std::invalid_argument naming the fault as
// written, what is wrong with it and the expected form with an example, e.g.
// "fault 'kill:x@3s': PEER 'x' is not a rank; expected kill:PEER@T, e.g. kill:3@30s".
std::vector<Fault> parse_faults(std::string_view spec);

// Checks parsed faults against a run of `peers` peers: every rank is in 0..peers-1, no
// peer has two slow or two link faults, and no two partitions, nor two freezes or two
// disk-full faults of one peer, overlap in time (as far as their units allow to tell). Several kill and
// restart faults of one peer, even at the same time, are fine. Throws std::invalid_argument naming the fault.
void check_faults(const std::vector<Fault>& faults, int peers);

}  // namespace hearsay::sim
