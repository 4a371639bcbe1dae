// `hearsay sim --chaos SEED[:RATE]`: a random, reproducible schedule of overlapping faults,
// drawn once per sweep and given to every algorithm and repeat as its --faults SPEC (so the
// schedule is printed, stored in summary.json and rerun from the seed alone).
//
// What a schedule holds, about RATE faults per epoch of the run (default 2), at times in
// epochs from 5% of the run; every fault that ends has ended by 75% of it, so the last
// quarter shows whether the run recovers:
//   - a peer killed and restarted (with --resume) a little later, or killed for good (at
//     most a quarter of the peers dead at once, and never all but one);
//   - a peer that computes 2-5x slower from some time on;
//   - a peer behind a slow, lossy, duplicating or reordering link, for the whole run or
//     for a while (it turns bad, then heals);
//   - a partition of the peers into two groups for a while (one at a time);
//   - a peer frozen for a while (SIGSTOP, then SIGCONT);
//   - a peer whose disk is full for a while (its checkpoints fail).
// A fault is only drawn where it can fire: no freeze or kill of a peer that is dead or
// frozen then, no second slowdown or link for a peer. Times are in epochs so that one
// schedule means the same in both engines and at any speed.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace hearsay::sim {

struct ChaosSpec {
  std::uint64_t seed = 0;
  double rate = 2;  // faults per epoch of the run

  bool operator==(const ChaosSpec&) const = default;
};

// "7" or "7:3.5"; std::invalid_argument saying what is wrong and the form, e.g.
// "--chaos 'x': SEED 'x' is not a non-negative integer; expected SEED[:RATE], e.g. 7 or 7:3".
ChaosSpec parse_chaos(std::string_view text);

// The --faults SPEC that `chaos` draws for a run of `peers` peers (at least 2) and `epochs`
// epochs: the same for the same arguments, on every machine.
std::string chaos_faults(const ChaosSpec& chaos, int peers, double epochs);

}  // namespace hearsay::sim
