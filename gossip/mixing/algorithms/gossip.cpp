#include "gossip/mixing/algorithms/gossip.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "gossip/mixing/algorithms/learnt_timeout.hpp"

namespace hearsay::algorithms {

namespace {

// Distinct partner streams per rank from one run seed (SplitMix64 of seed and rank).
std::uint64_t partner_seed(std::uint64_t seed, int rank) {
  return Rng(seed ^ (0x9E3779B97F4A7C15ULL * static_cast<std::uint64_t>(rank + 1))).next_u64();
}

}  // namespace

Gossip::Gossip(transport::Transport& transport, PeerSet peers, AlgorithmOptions options)
    : Algorithm(transport, std::move(peers), options),
      exchange_(transport_, peers_, options_, log_, "gossip"),
      rng_(partner_seed(options_.seed, peers_.self)) {
  if (options_.fanout < 1)
    throw std::invalid_argument("gossip: fanout " + std::to_string(options_.fanout) +
                                " must be at least 1 (--fanout)");
  // Every gossip peer asks too, so a slow partner asked less often still mixes.
  exchange_.floor_typical(PartnerTiming::kTypicalFloor);
  list_others();
}

void Gossip::list_others() {
  others_.clear();
  for (int rank = 0; rank < peers_.size(); ++rank)
    if (rank != peers_.self) others_.push_back(rank);
}

void Gossip::set_peers(PeerSet peers) {
  exchange_.set_peers(peers);  // checks the set first
  peers_ = std::move(peers);
  list_others();
}

std::vector<int> Gossip::choose_partners() {
  return exchange_.choose(others_, static_cast<std::size_t>(options_.fanout), rng_);
}

bool Gossip::round_needed() {
  const std::uint64_t served = exchange_.counters().served;
  const bool averaged_meanwhile = served != served_seen_;
  served_seen_ = served;
  return options_.always_start_round || !averaged_meanwhile;
}

RoundResult Gossip::mix(std::span<float> params, std::uint64_t round) {
  exchange_.begin_round(params, round);
  if (others_.empty()) return exchange_.end_round();  // alone in the run: nothing to mix
  if (exchange_.open()) {
    // The last round's requests are still out (a slow or lossy partner): take what has
    // arrived and go back to training; the next round starts once they settle.
    exchange_.pump(params, Clock::now());
    return exchange_.end_round();
  }
  const std::vector<int> partners = choose_partners();
  if (partners.empty()) {
    // Everyone is left out for now: answer whoever calls for half a step's compute rather
    // than return at once (and spin through empty rounds while the compute is unknown);
    // not the learnt reply wait, which stays the round timeout until round trips are known.
    exchange_.pump(params, Clock::now() + within_compute(options_.round_timeout, compute_per_round()));
  } else {
    const auto compute = compute_per_round();
    auto wait = exchange_.reply_wait(compute);
    // Replies that will miss the wait but be there by the next round are not waited for:
    // they are applied when they come, as any reply that misses its round.
    if (exchange_.wait_is_lost(partners, wait, compute)) wait = Clock::duration::zero();
    const auto deadline = Clock::now() + wait;
    exchange_.start(params, partners, 1.0 / static_cast<double>(partners.size() + 1));
    exchange_.pump(params, deadline, [this] { return exchange_.awaited() == 0; });
  }
  return exchange_.end_round();
}

void Gossip::serve(std::span<float> params, Clock::time_point deadline) {
  exchange_.serve(params, deadline);
}

}  // namespace hearsay::algorithms
