// Partitions of a training set among ranks: every kind must split [0, count) exactly, the same way
// on every rank, and with the skew it promises.
#include <algorithm>
#include <catch2/catch.hpp>
#include <set>
#include <string>
#include <vector>

#include "base/rng.hpp"
#include "model/data/dataset.hpp"
#include "model/data/partition.hpp"

using namespace hearsay;
using Catch::Matchers::Contains;

namespace {

using Shards = std::vector<std::vector<std::int64_t>>;

// Only labels matter to a partition, so the images are 1x1 pixels.
Dataset labelled(std::int64_t count, int classes, std::uint64_t seed) {
  Dataset d;
  d.count = count;
  d.rows = d.cols = 1;
  d.classes = classes;
  d.images.assign(static_cast<std::size_t>(count), 0.5f);
  Rng rng(seed);
  for (std::int64_t i = 0; i < count; ++i) d.labels.push_back(static_cast<std::uint8_t>(rng.below(classes)));
  return d;
}

Shards all_shards(const Dataset& d, int world, const PartitionSpec& spec, std::uint64_t seed) {
  Shards shards;
  for (int rank = 0; rank < world; ++rank) shards.push_back(shard_indices(d, {rank, world}, spec, seed));
  return shards;
}

// Sorted, disjoint and covering [0, count): every index appears in exactly one shard.
void require_partition(const Shards& shards, std::int64_t count) {
  std::vector<int> owners(static_cast<std::size_t>(count), 0);
  for (const auto& shard : shards) {
    REQUIRE(std::is_sorted(shard.begin(), shard.end()));
    for (std::int64_t i : shard) {
      REQUIRE((i >= 0 && i < count));
      ++owners[static_cast<std::size_t>(i)];
    }
  }
  for (std::int64_t i = 0; i < count; ++i) REQUIRE(owners[static_cast<std::size_t>(i)] == 1);
}

// Mean over ranks of the largest share one class has of that rank's examples: 1/classes when
// every rank sees the global mix, 1 when every rank sees a single class.
double mean_top_class_share(const Dataset& d, const Shards& shards) {
  double total = 0;
  for (const auto& shard : shards) {
    std::vector<int> per_class(static_cast<std::size_t>(d.classes), 0);
    for (std::int64_t i : shard) ++per_class[d.labels[static_cast<std::size_t>(i)]];
    if (!shard.empty()) total += *std::max_element(per_class.begin(), per_class.end()) / double(shard.size());
  }
  return total / static_cast<double>(shards.size());
}

std::set<int> classes_of(const Dataset& d, const std::vector<std::int64_t>& shard) {
  std::set<int> classes;
  for (std::int64_t i : shard) classes.insert(d.labels[static_cast<std::size_t>(i)]);
  return classes;
}

std::string partition_error(const std::string& text) {
  try {
    parse_partition(text);
  } catch (const DataError& e) {
    return e.what();
  }
  FAIL("parse_partition('" << text << "') did not throw DataError");
  return {};
}

}  // namespace

TEST_CASE("every partition kind splits the data exactly and deterministically", "[data][partition]") {
  const Dataset d = labelled(5003, 10, 42);
  for (const char* text : {"iid", "dirichlet:0.5", "dirichlet:0.1", "by-label"}) {
    const PartitionSpec spec = parse_partition(text);
    for (int world : {1, 3, 8}) {
      INFO(text << " over " << world << " ranks");
      const Shards shards = all_shards(d, world, spec, 7);
      require_partition(shards, d.count);
      CHECK(all_shards(d, world, spec, 7) == shards);
      if (world > 1 && spec.kind != PartitionSpec::Kind::by_label)
        CHECK(all_shards(d, world, spec, 8) != shards);
      for (const auto& shard : shards) CHECK(!shard.empty());
    }
  }
}

TEST_CASE("iid shards differ in size by at most one and mix all classes", "[data][partition]") {
  const Dataset d = labelled(1001, 10, 1);
  const Shards shards = all_shards(d, 8, parse_partition("iid"), 3);
  std::size_t smallest = d.count, largest = 0;
  for (const auto& shard : shards) {
    smallest = std::min(smallest, shard.size());
    largest = std::max(largest, shard.size());
    CHECK(classes_of(d, shard).size() == 10);
  }
  CHECK(largest - smallest <= 1);
  CHECK(mean_top_class_share(d, shards) < 0.25);
}

TEST_CASE("dirichlet skew follows alpha", "[data][partition]") {
  const Dataset d = labelled(10000, 10, 5);
  const double skewed = mean_top_class_share(d, all_shards(d, 8, parse_partition("dirichlet:0.1"), 11));
  const double mixed = mean_top_class_share(d, all_shards(d, 8, parse_partition("dirichlet:100"), 11));
  INFO("alpha 0.1: " << skewed << ", alpha 100: " << mixed);
  CHECK(skewed > 0.4);
  CHECK(mixed < 0.2);
  CHECK(skewed > 3 * mixed);
}

TEST_CASE("dirichlet with a vanishing alpha still partitions", "[data][partition]") {
  const Dataset d = labelled(300, 10, 6);
  PartitionSpec spec;
  spec.kind = PartitionSpec::Kind::dirichlet;
  spec.alpha = 1e-6;  // every gamma draw underflows to zero
  require_partition(all_shards(d, 5, spec, 1), d.count);
  // More ranks than examples: some shards must be empty, but it is still a partition.
  const Dataset tiny = labelled(3, 10, 6);
  require_partition(all_shards(tiny, 8, parse_partition("dirichlet:0.5"), 1), tiny.count);
}

TEST_CASE("by-label deals whole classes to ranks", "[data][partition]") {
  const Dataset d = labelled(4000, 10, 9);
  const PartitionSpec spec = parse_partition("by-label");

  const Shards ten = all_shards(d, 10, spec, 1);
  for (int rank = 0; rank < 10; ++rank) CHECK(classes_of(d, ten[rank]) == std::set<int>{rank});

  const Shards three = all_shards(d, 3, spec, 1);
  CHECK(classes_of(d, three[0]) == std::set<int>{0, 3, 6, 9});
  CHECK(classes_of(d, three[1]) == std::set<int>{1, 4, 7});
  CHECK(classes_of(d, three[2]) == std::set<int>{2, 5, 8});

  // 25 ranks, 10 classes: classes 0-4 are shared by three ranks, 5-9 by two, split evenly.
  const Shards many = all_shards(d, 25, spec, 1);
  require_partition(many, d.count);
  for (int rank = 0; rank < 25; ++rank) {
    REQUIRE(classes_of(d, many[rank]) == std::set<int>{rank % 10});
    const auto class_size = std::count(d.labels.begin(), d.labels.end(), rank % 10);
    const int sharers = rank % 10 < 5 ? 3 : 2;
    CHECK(std::abs(static_cast<long>(many[rank].size()) * sharers - class_size) <= sharers);
  }
  CHECK(all_shards(d, 25, spec, 2) != many);  // shared classes are split at random
}

TEST_CASE("parse_partition accepts the documented forms only", "[data][partition]") {
  CHECK(parse_partition("iid").kind == PartitionSpec::Kind::iid);
  CHECK(parse_partition("by-label").kind == PartitionSpec::Kind::by_label);
  const PartitionSpec dirichlet = parse_partition("dirichlet:0.25");
  CHECK(dirichlet.kind == PartitionSpec::Kind::dirichlet);
  CHECK(dirichlet.alpha == 0.25);
  CHECK(parse_partition("dirichlet:3").alpha == 3.0);
  for (const char* text : {"iid", "by-label", "dirichlet:0.25", "dirichlet:100"})
    CHECK(to_string(parse_partition(text)) == text);

  for (const char* text : {"dirichlet:", "dirichlet:-1", "dirichlet:0", "dirichlet:abc", "dirichlet:1x",
                           "dirichlet:nan", "dirichlet:inf", "foo", "", "IID", "by_label", "dirichlet"}) {
    const std::string message = partition_error(text);
    INFO(message);
    CHECK_THAT(message, Contains("iid") && Contains("dirichlet:ALPHA") && Contains("by-label"));
    CHECK_THAT(message, Contains("'" + std::string(text) + "'"));
  }
}

TEST_CASE("parse_shard accepts RANK/WORLD with 0 <= RANK < WORLD", "[data][partition]") {
  const ShardSpec shard = parse_shard("2/5");
  CHECK(shard.rank == 2);
  CHECK(shard.world == 5);
  CHECK(parse_shard("0/1").world == 1);
  CHECK(to_string(parse_shard("7/16")) == "7/16");
  for (const char* text :
       {"3/2", "a/b", "-1/4", "2/2", "0/0", "1/-3", "1", "/4", "1/", "1/4x", " 1/4", "1//4", ""}) {
    INFO(text);
    CHECK_THROWS_AS(parse_shard(text), DataError);
  }
  CHECK_THROWS_WITH(parse_shard("3/2"), Contains("RANK/WORLD") && Contains("'3/2'"));
}

TEST_CASE("shard_indices rejects bad shards and labels", "[data][partition]") {
  Dataset d = labelled(50, 10, 1);
  const PartitionSpec iid = parse_partition("iid");
  CHECK_THROWS_AS(shard_indices(d, {3, 3}, iid, 1), DataError);
  CHECK_THROWS_AS(shard_indices(d, {-1, 3}, iid, 1), DataError);
  CHECK_THROWS_AS(shard_indices(d, {0, 0}, iid, 1), DataError);
  PartitionSpec zero_alpha;
  zero_alpha.kind = PartitionSpec::Kind::dirichlet;
  CHECK_THROWS_AS(shard_indices(d, {0, 2}, zero_alpha, 1), DataError);
  d.labels[13] = 10;
  CHECK_THROWS_AS(shard_indices(d, {0, 2}, parse_partition("by-label"), 1), DataError);
}
