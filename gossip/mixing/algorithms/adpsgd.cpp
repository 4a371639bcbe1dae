#include "gossip/mixing/algorithms/adpsgd.hpp"

#include <algorithm>
#include <deque>
#include <set>
#include <stdexcept>
#include <string>

#include "gossip/mixing/algorithms/learnt_timeout.hpp"

namespace hearsay::algorithms {

namespace {

// Distinct partner streams per rank from one run seed (SplitMix64 of seed and rank).
std::uint64_t partner_seed(std::uint64_t seed, int rank) {
  return Rng(seed ^ (0xD1B54A32D192ED03ULL * static_cast<std::uint64_t>(rank + 1))).next_u64();
}

// Undirected neighbour sets: every edge of every round of the period, either direction.
std::vector<std::set<int>> undirected_edges(const topology::Topology& graph) {
  std::vector<std::set<int>> adjacent(static_cast<std::size_t>(graph.peers()));
  for (std::uint64_t round = 0; round < graph.period(); ++round)
    for (int rank = 0; rank < graph.peers(); ++rank)
      for (const int other : graph.out_neighbours(rank, round)) {
        adjacent[static_cast<std::size_t>(rank)].insert(other);
        adjacent[static_cast<std::size_t>(other)].insert(rank);
      }
  return adjacent;
}

}  // namespace

ActivePassiveSplit split_active_passive(int peers, const topology::Topology* graph) {
  ActivePassiveSplit split;
  split.active.resize(static_cast<std::size_t>(std::max(peers, 0)));
  for (int rank = 0; rank < peers; ++rank) split.active[static_cast<std::size_t>(rank)] = rank % 2 == 0;
  if (graph == nullptr) return split;
  check_graph_matches("adpsgd", *graph, peers);
  // Breadth-first 2-colouring, each component starting at its lowest rank with colour 0.
  const auto adjacent = undirected_edges(*graph);
  std::vector<int> colour(static_cast<std::size_t>(peers), -1);
  for (int root = 0; root < peers; ++root) {
    if (colour[static_cast<std::size_t>(root)] >= 0) continue;
    colour[static_cast<std::size_t>(root)] = 0;
    std::deque<int> queue{root};
    while (!queue.empty()) {
      const int rank = queue.front();
      queue.pop_front();
      for (const int other : adjacent[static_cast<std::size_t>(rank)]) {
        int& c = colour[static_cast<std::size_t>(other)];
        if (c < 0) {
          c = 1 - colour[static_cast<std::size_t>(rank)];
          queue.push_back(other);
        } else if (c == colour[static_cast<std::size_t>(rank)]) {
          return split;  // an odd cycle: not bipartite, keep even/odd
        }
      }
    }
  }
  for (int rank = 0; rank < peers; ++rank)
    split.active[static_cast<std::size_t>(rank)] = colour[static_cast<std::size_t>(rank)] == 0;
  split.from_graph = true;
  return split;
}

AdPsgd::AdPsgd(transport::Transport& transport, PeerSet peers, AlgorithmOptions options)
    : AdPsgd(transport, std::move(peers), options, nullptr) {}

AdPsgd::AdPsgd(transport::Transport& transport, PeerSet peers, AlgorithmOptions options,
               const topology::Topology& graph)
    : AdPsgd(transport, std::move(peers), options, &graph) {}

AdPsgd::AdPsgd(transport::Transport& transport, PeerSet peers, AlgorithmOptions options,
               const topology::Topology* graph)
    : Algorithm(transport, std::move(peers), options),
      exchange_(transport_, peers_, options_, log_, "adpsgd"),
      rng_(partner_seed(options_.seed, peers_.self)) {
  const ActivePassiveSplit split = split_active_passive(peers_.size(), graph);
  split_from_graph_ = split.from_graph;
  active_ = split.active[static_cast<std::size_t>(peers_.self)];
  if (graph != nullptr) {
    const auto adjacent = undirected_edges(*graph);
    const auto& mine = adjacent[static_cast<std::size_t>(peers_.self)];
    reach_out_to_.assign(mine.begin(), mine.end());
  }
  for (int rank = 0; rank < peers_.size(); ++rank)
    if (rank != peers_.self) everyone_else_.push_back(rank);
  if (!active_) return;
  for (const int other : reach_out_to_)  // the graph's neighbours
    if (!split.active[static_cast<std::size_t>(other)]) candidates_.push_back(other);
  if (candidates_.empty())
    for (int rank = 0; rank < peers_.size(); ++rank)
      if (!split.active[static_cast<std::size_t>(rank)]) candidates_.push_back(rank);
}

RoundResult AdPsgd::mix(std::span<float> params, std::uint64_t round) {
  exchange_.begin_round(params, round);
  if (!active_) {
    // A passive peer that answered a request since its last round (serve(), while it
    // computed) keeps pace with its partners: it trains on at once. Waiting for one more in
    // every round made passive peers 25% slower than active ones (8 LeNet peers: 1,900
    // against 2,500 samples/s) and 50-70x before the wait was bounded by the compute.
    const std::uint64_t served = exchange_.counters().served;
    const bool kept_pace = served > served_at_last_round_;
    starved_rounds_ = kept_pace ? 0 : starved_rounds_ + 1;
    if (starved_rounds_ > kStarvedAfter || exchange_.open()) return reach_out(params);
    // Waiting for a request, not a reply: no round trip to learn from, only the compute.
    const auto deadline =
        Clock::now() +
        (kept_pace ? Clock::duration::zero() : within_compute(options_.round_timeout, compute_per_round()));
    exchange_.pump(params, deadline, [this] { return exchange_.served_this_round() >= 1; });
    if (exchange_.served_this_round() >= 1) starved_rounds_ = 0;
    served_at_last_round_ = exchange_.counters().served;
    return exchange_.end_round();
  }
  if (candidates_.empty()) return exchange_.end_round();  // a run of one peer: nobody to mix with
  const auto deadline = Clock::now() + exchange_.reply_wait(compute_per_round());
  if (exchange_.open()) {
    // The last request is still out: no second one before it settles (pairwise.hpp).
    exchange_.pump(params, Clock::now());
    return exchange_.end_round();
  }
  std::vector<int> partner = exchange_.choose(candidates_, 1, rng_);
  // Every passive partner is left out (dead, or across a partition that split the active
  // peers from the passive ones): any live neighbour will do, active ones too.
  if (partner.empty()) partner = exchange_.choose(reach_out_to_, 1, rng_);
  if (partner.empty()) partner = exchange_.choose(everyone_else_, 1, rng_);
  if (partner.empty()) {
    // Every partner is left out for now: answer whoever calls for half a step's compute
    // (the learnt reply wait is the round timeout until round trips are known: a peer
    // whose partners all left after a lossy run had learnt too few took 2 s a step).
    exchange_.pump(params, Clock::now() + within_compute(options_.round_timeout, compute_per_round()));
    return exchange_.end_round();
  }
  exchange_.start(params, partner, 0.5);
  exchange_.pump(params, deadline, [this] { return exchange_.awaited() == 0; });
  return exchange_.end_round();
}

RoundResult AdPsgd::reach_out(std::span<float> params) {
  if (exchange_.open()) {  // our last request is still out: take what came, start nothing
    exchange_.pump(params, Clock::now());
    served_at_last_round_ = exchange_.counters().served;
    return exchange_.end_round();
  }
  // A passive peer has timed no round trip (it only serves) when it reaches out: its
  // request expires after a few of its steps' compute, not the round timeout. Held open
  // that long across a partition, it kept the peer's snapshot busy to every active peer
  // that asked for 2 s after the partition healed (soak seed 20: active and passive peers
  // split for 0.3 of 3 epochs mixed only among themselves for 1.4 epochs more; 5 points).
  const Clock::duration compute = compute_per_round();
  exchange_.bound_first_expiry(compute > Clock::duration::zero()
                                   ? std::max<Clock::duration>(kFirstExpiryFloor, 4 * compute)
                                   : options_.round_timeout / 8);
  std::vector<int> partner = exchange_.choose(reach_out_to_, 1, rng_);
  if (partner.empty()) partner = exchange_.choose(everyone_else_, 1, rng_);
  if (!partner.empty()) {
    const auto deadline = Clock::now() + exchange_.reply_wait(compute_per_round());
    exchange_.start(params, partner, 0.5);
    exchange_.pump(params, deadline, [this] { return exchange_.awaited() == 0; });
  }
  starved_rounds_ = 0;
  served_at_last_round_ = exchange_.counters().served;
  return exchange_.end_round();
}

void AdPsgd::serve(std::span<float> params, Clock::time_point deadline) { exchange_.serve(params, deadline); }

}  // namespace hearsay::algorithms
