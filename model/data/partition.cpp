#include "model/data/partition.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>
#include <string_view>

#include "base/rng.hpp"

namespace hearsay {
namespace {

constexpr int kDirichletAttempts = 1000;

[[noreturn]] void bad_partition(const std::string& text, const std::string& why) {
  throw DataError(
      "bad partition '" + text + "': " + why +
      ". Accepted forms: iid | dirichlet:ALPHA (ALPHA a number > 0, e.g. dirichlet:0.5) | by-label");
}

[[noreturn]] void bad_shard(const std::string& text, const std::string& why) {
  throw DataError("bad shard '" + text + "': " + why +
                  ". Expected RANK/WORLD with 0 <= RANK < WORLD, e.g. 0/4");
}

// Whole-string integer parse: from_chars alone would accept "3abc" as 3.
bool parse_int(std::string_view text, int& value) {
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  return ec == std::errc() && ptr == end && !text.empty();
}

// Example indices grouped by label, each group ascending.
std::vector<std::vector<std::int64_t>> indices_by_class(const Dataset& d) {
  if (static_cast<std::int64_t>(d.labels.size()) != d.count)
    throw DataError("partition: the dataset has " + std::to_string(d.labels.size()) + " labels for " +
                    std::to_string(d.count) + " examples");
  std::vector<std::vector<std::int64_t>> groups(static_cast<std::size_t>(std::max(d.classes, 0)));
  for (std::int64_t i = 0; i < d.count; ++i) {
    const int label = d.labels[static_cast<std::size_t>(i)];
    if (label >= d.classes)
      throw DataError("partition: label " + std::to_string(label) + " of example " + std::to_string(i) +
                      " is not below the class count " + std::to_string(d.classes));
    groups[static_cast<std::size_t>(label)].push_back(i);
  }
  return groups;
}

std::vector<std::int64_t> iid_shard(const Dataset& d, ShardSpec shard, Rng& rng) {
  std::vector<std::int64_t> all(static_cast<std::size_t>(d.count));
  std::iota(all.begin(), all.end(), std::int64_t{0});
  rng.shuffle(all.begin(), all.end());
  const std::int64_t begin = d.count * shard.rank / shard.world;
  const std::int64_t end = d.count * (shard.rank + 1) / shard.world;
  return {all.begin() + begin, all.begin() + end};
}

// cuts[c][r]..cuts[c][r+1] is the slice of class c's shuffled indices that rank r gets.
using ClassCuts = std::vector<std::vector<std::int64_t>>;

ClassCuts draw_dirichlet_cuts(const std::vector<std::vector<std::int64_t>>& groups, int world, double alpha,
                              Rng& rng) {
  ClassCuts cuts(groups.size(), std::vector<std::int64_t>(static_cast<std::size_t>(world) + 1, 0));
  std::vector<double> weights(static_cast<std::size_t>(world));
  for (std::size_t c = 0; c < groups.size(); ++c) {
    double sum = 0;
    for (auto& w : weights) sum += (w = rng.gamma(alpha));
    // With tiny alpha every gamma draw can underflow to 0; the limit of Dirichlet(alpha -> 0) is
    // "everything to one rank", so do exactly that.
    if (!(sum > 0) || !std::isfinite(sum)) {
      std::fill(weights.begin(), weights.end(), 0.0);
      weights[rng.below(static_cast<std::uint64_t>(world))] = sum = 1.0;
    }
    const auto n = static_cast<double>(groups[c].size());
    double running = 0;
    for (int r = 0; r < world; ++r) {
      running += weights[static_cast<std::size_t>(r)];
      // llround of a non-decreasing sequence is non-decreasing, so slices never overlap.
      cuts[c][static_cast<std::size_t>(r) + 1] = std::llround(std::min(running / sum, 1.0) * n);
    }
    cuts[c][static_cast<std::size_t>(world)] = static_cast<std::int64_t>(groups[c].size());
  }
  return cuts;
}

bool every_rank_has_data(const ClassCuts& cuts, int world) {
  for (int r = 0; r < world; ++r) {
    std::int64_t total = 0;
    for (const auto& class_cuts : cuts) total += class_cuts[r + 1] - class_cuts[r];
    if (total == 0) return false;
  }
  return true;
}

std::vector<std::int64_t> dirichlet_shard(const Dataset& d, ShardSpec shard, double alpha, Rng& rng) {
  auto groups = indices_by_class(d);
  for (auto& group : groups) rng.shuffle(group.begin(), group.end());
  // Redraw (from the same stream, so still deterministic) while some rank would get nothing: an
  // empty shard cannot train. Only worth trying when there are enough examples to go round.
  ClassCuts cuts;
  for (int attempt = 0; attempt < kDirichletAttempts; ++attempt) {
    cuts = draw_dirichlet_cuts(groups, shard.world, alpha, rng);
    if (d.count < shard.world || every_rank_has_data(cuts, shard.world)) break;
  }
  std::vector<std::int64_t> mine;
  for (std::size_t c = 0; c < groups.size(); ++c)
    mine.insert(mine.end(), groups[c].begin() + cuts[c][shard.rank],
                groups[c].begin() + cuts[c][shard.rank + 1]);
  return mine;
}

std::vector<std::int64_t> by_label_shard(const Dataset& d, ShardSpec shard, Rng& rng) {
  auto groups = indices_by_class(d);
  const int classes = d.classes;
  std::vector<std::int64_t> mine;
  for (int c = 0; c < classes; ++c) {
    auto& group = groups[static_cast<std::size_t>(c)];
    if (shard.world <= classes) {
      if (c % shard.world == shard.rank) mine.insert(mine.end(), group.begin(), group.end());
      continue;
    }
    // More ranks than classes: ranks c, c + classes, c + 2*classes, ... share class c. Shuffle every
    // class (not just ours) so all ranks consume the random stream identically.
    rng.shuffle(group.begin(), group.end());
    if (shard.rank % classes != c) continue;
    const std::int64_t sharers = (shard.world - c + classes - 1) / classes;
    const std::int64_t position = shard.rank / classes;
    const auto n = static_cast<std::int64_t>(group.size());
    mine.insert(mine.end(), group.begin() + n * position / sharers,
                group.begin() + n * (position + 1) / sharers);
  }
  return mine;
}

}  // namespace

PartitionSpec parse_partition(const std::string& text) {
  PartitionSpec spec;
  if (text == "iid") return spec;
  if (text == "by-label") {
    spec.kind = PartitionSpec::Kind::by_label;
    return spec;
  }
  constexpr std::string_view kDirichlet = "dirichlet:";
  if (text.rfind(kDirichlet, 0) == 0) {
    const std::string_view number = std::string_view(text).substr(kDirichlet.size());
    if (number.empty()) bad_partition(text, "missing ALPHA after 'dirichlet:'");
    double alpha = 0;
    const char* end = number.data() + number.size();
    const auto [ptr, ec] = std::from_chars(number.data(), end, alpha);
    if (ec != std::errc() || ptr != end)
      bad_partition(text, "ALPHA '" + std::string(number) + "' is not a number");
    if (!std::isfinite(alpha) || alpha <= 0) bad_partition(text, "ALPHA must be a finite number > 0");
    spec.kind = PartitionSpec::Kind::dirichlet;
    spec.alpha = alpha;
    return spec;
  }
  bad_partition(text, "unknown partition");
}

std::string to_string(const PartitionSpec& spec) {
  switch (spec.kind) {
    case PartitionSpec::Kind::iid:
      return "iid";
    case PartitionSpec::Kind::by_label:
      return "by-label";
    case PartitionSpec::Kind::dirichlet: {
      // Shortest round-trip form, so parse_partition(to_string(s)) gives s back exactly.
      char buffer[64];
      const auto [ptr, ec] = std::to_chars(buffer, buffer + sizeof buffer, spec.alpha);
      return "dirichlet:" + std::string(buffer, ec == std::errc() ? ptr : buffer);
    }
  }
  return "unknown";
}

ShardSpec parse_shard(const std::string& text) {
  const auto slash = text.find('/');
  if (slash == std::string::npos) bad_shard(text, "no '/'");
  ShardSpec shard;
  if (!parse_int(std::string_view(text).substr(0, slash), shard.rank))
    bad_shard(text, "RANK is not an integer");
  if (!parse_int(std::string_view(text).substr(slash + 1), shard.world))
    bad_shard(text, "WORLD is not an integer");
  if (shard.world < 1) bad_shard(text, "WORLD must be at least 1");
  if (shard.rank < 0 || shard.rank >= shard.world) bad_shard(text, "RANK must be in [0, WORLD)");
  return shard;
}

std::string to_string(const ShardSpec& shard) {
  return std::to_string(shard.rank) + "/" + std::to_string(shard.world);
}

std::vector<std::int64_t> shard_indices(const Dataset& d, ShardSpec shard, PartitionSpec spec,
                                        std::uint64_t seed) {
  if (shard.world < 1 || shard.rank < 0 || shard.rank >= shard.world)
    throw DataError("shard_indices: bad shard " + to_string(shard) + " (need 0 <= rank < world)");
  if (d.classes < 1) throw DataError("shard_indices: the dataset has no classes");
  Rng rng(seed);
  std::vector<std::int64_t> mine;
  switch (spec.kind) {
    case PartitionSpec::Kind::iid:
      mine = iid_shard(d, shard, rng);
      break;
    case PartitionSpec::Kind::dirichlet:
      if (!std::isfinite(spec.alpha) || spec.alpha <= 0)
        throw DataError("shard_indices: dirichlet alpha must be a finite number > 0, got " +
                        std::to_string(spec.alpha));
      mine = dirichlet_shard(d, shard, spec.alpha, rng);
      break;
    case PartitionSpec::Kind::by_label:
      mine = by_label_shard(d, shard, rng);
      break;
  }
  std::sort(mine.begin(), mine.end());
  return mine;
}

}  // namespace hearsay
