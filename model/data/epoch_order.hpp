// The order in which a peer trains its shard, epoch by epoch. The shard is read as an
// endless stream of passes, pass p being the shard shuffled p + 1 times from one seed, and
// epoch e is the stream's examples [(e - 1) * per_epoch, e * per_epoch). When per_epoch is
// the shard's size, epoch e is pass e - 1, each example once. When every peer of a run
// takes the same number of examples per epoch (the training set over the world size, as
// PyTorch's DistributedSampler pads), a small shard wraps around, reshuffled as it does,
// and a large one is cut: unequal shards still give every peer the same steps per epoch.
// A resumed peer rebuilds the order from (seed, epoch) alone. Peer processes and the
// simulator's virtual peers share it, so both engines train the same examples in the same
// order.
#pragma once
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "base/rng.hpp"

namespace hearsay {

// The shuffles' seed of the peer `peer_id` in a run of --seed `seed`.
inline std::uint64_t data_order_seed(std::uint64_t seed, std::string_view peer_id) {
  return seed ^ 0x5eed5eed5eed5eedULL ^ stable_hash(peer_id);
}

// Examples each peer trains per epoch when all `world` peers take the same number: the
// training set over the world size, rounded up. world <= 0 (no fixed ranks): the shard's own.
inline std::int64_t examples_per_epoch(std::int64_t train_set, std::int64_t shard, int world) {
  if (world <= 0) return shard;
  return (train_set + world - 1) / world;
}

class EpochOrder {
 public:
  // per_epoch <= 0: the shard's size.
  EpochOrder(std::int64_t examples, std::uint64_t seed, std::int64_t per_epoch = 0)
      : examples_(examples), per_epoch_(per_epoch > 0 ? per_epoch : examples), seed_(seed) {
    if (examples_ <= 0) throw std::invalid_argument("EpochOrder: the shard is empty");
  }
  std::uint64_t seed() const noexcept { return seed_; }
  std::int64_t per_epoch() const noexcept { return per_epoch_; }
  // The indices (into the shard) of epoch `epoch` (from 1), in training order. Epoch after
  // epoch continues the stream; only a jump (a resume, a pulled state) replays the
  // shuffles from the start.
  const std::vector<std::int64_t>& of(std::int64_t epoch) {
    const std::int64_t first = (epoch - 1) * per_epoch_;
    if (epoch != epoch_ + 1) restart();
    epoch_ = epoch;
    // Passes wholly before this epoch are shuffled past without being kept.
    while ((pass_ + 1) * examples_ <= first) next_pass();
    order_.clear();
    for (std::int64_t at = first; at < first + per_epoch_; ++at) {
      if (at >= (pass_ + 1) * examples_) next_pass();
      order_.push_back(pass_order_[static_cast<std::size_t>(at - pass_ * examples_)]);
    }
    return order_;
  }

 private:
  void restart() {
    pass_order_.resize(static_cast<std::size_t>(examples_));
    for (std::int64_t i = 0; i < examples_; ++i) pass_order_[static_cast<std::size_t>(i)] = i;
    rng_ = Rng(seed_);
    rng_.shuffle(pass_order_.begin(), pass_order_.end());
    pass_ = 0;
  }
  void next_pass() {
    rng_.shuffle(pass_order_.begin(), pass_order_.end());
    ++pass_;
  }

  std::int64_t examples_, per_epoch_;
  std::uint64_t seed_;
  std::vector<std::int64_t> pass_order_;  // the order of pass pass_
  std::vector<std::int64_t> order_;       // the order of epoch epoch_
  Rng rng_{0};                            // the shuffles' source, as of pass_
  std::int64_t pass_ = 0;
  std::int64_t epoch_ = -1;  // none built yet
};

}  // namespace hearsay
