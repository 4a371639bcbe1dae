// How a training set is split among peers. Every peer computes the whole split from the same seed
// and keeps its own part, so no coordination is needed and the parts never overlap.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/data/dataset.hpp"

namespace hearsay {

struct PartitionSpec {
  // iid: a uniform random split. dirichlet: per class, rank shares drawn from Dirichlet(alpha), the
  // usual model of non-IID federated data (small alpha: each rank sees few classes). by_label: whole
  // classes dealt to ranks, the most skewed case.
  enum class Kind { iid, dirichlet, by_label } kind = Kind::iid;
  double alpha = 0;  // dirichlet only, > 0
};

// "iid" | "dirichlet:ALPHA" (ALPHA a number > 0) | "by-label". DataError otherwise, listing the forms.
PartitionSpec parse_partition(const std::string& text);
// The inverse of parse_partition, for logs and metrics.
std::string to_string(const PartitionSpec& spec);

struct ShardSpec {
  int rank = 0, world = 1;
};

// "RANK/WORLD" with 0 <= RANK < WORLD; DataError otherwise.
ShardSpec parse_shard(const std::string& text);
std::string to_string(const ShardSpec& shard);

// The indices of the examples shard.rank owns, sorted ascending. Deterministic from seed, and the
// shards of ranks 0..world-1 together are a partition of [0, d.count): disjoint and covering.
//   iid: shuffle all indices, rank takes its contiguous 1/world slice (sizes differ by at most 1).
//   dirichlet: per class, shuffle its indices and cut them by Dirichlet(alpha) proportions over
//     ranks. Draws that leave a rank empty are redrawn (up to 1000 times, deterministically), so
//     every rank gets data whenever that is at all likely; with tiny alpha and many ranks a shard
//     can still come back empty, and the caller must check.
//   by_label: class c goes to rank c % world; when world > classes, the ranks r with
//     r % classes == c split class c's shuffled indices evenly.
// Throws DataError on a bad shard or alpha, or a label >= d.classes.
std::vector<std::int64_t> shard_indices(const Dataset& d, ShardSpec shard, PartitionSpec spec,
                                        std::uint64_t seed);

}  // namespace hearsay
