// The order in which a peer trains its shard, epoch by epoch: the shard shuffled e times
// from one seed for epoch e, so that a resumed peer rebuilds it from (seed, epoch) alone.
// Peer processes and the simulator's virtual peers share it, so both engines train the
// same examples in the same order.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "base/rng.hpp"

namespace hearsay {

// The shuffles' seed of the peer `peer_id` in a run of --seed `seed`.
inline std::uint64_t data_order_seed(std::uint64_t seed, std::string_view peer_id) {
  return seed ^ 0x5eed5eed5eed5eedULL ^ stable_hash(peer_id);
}

class EpochOrder {
 public:
  EpochOrder(std::int64_t examples, std::uint64_t seed) : examples_(examples), seed_(seed) {}
  std::uint64_t seed() const noexcept { return seed_; }
  // The indices (into the shard) of epoch `epoch` (from 1), in training order. Epoch after
  // epoch that is one more shuffle; only a jump (a resume, a pulled state) replays the
  // shuffles from the start.
  const std::vector<std::int64_t>& of(std::int64_t epoch) {
    if (epoch_ != epoch - 1) {
      order_.resize(static_cast<std::size_t>(examples_));
      for (std::int64_t i = 0; i < examples_; ++i) order_[static_cast<std::size_t>(i)] = i;
      rng_ = Rng(seed_);
      for (std::int64_t e = 1; e < epoch; ++e) rng_.shuffle(order_.begin(), order_.end());
    }
    rng_.shuffle(order_.begin(), order_.end());
    epoch_ = epoch;
    return order_;
  }

 private:
  std::int64_t examples_;
  std::uint64_t seed_;
  std::vector<std::int64_t> order_;  // the order of epoch epoch_
  Rng rng_{0};                       // the shuffles' source, as of epoch_
  std::int64_t epoch_ = -1;          // none built yet
};

}  // namespace hearsay
