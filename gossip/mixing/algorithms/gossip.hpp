// Randomized gossip ("gossip"): symmetric pairwise averaging, as in Boyd et al. 2006
// (not GoSGD's asymmetric push, Blot et al. 2016): every
// round each peer averages with `fanout` partners drawn at random among the live peers
// of the run, by the pairwise exchange of pairwise.hpp. Partners are equally likely
// unless one is much slower to answer than the others, which is then asked less often
// (PartnerTiming::choose).
//
// A round sends the k requests at once, all from one snapshot with alpha = 1/(k+1), and
// waits for the replies while answering partners' requests, for at most
// PairwiseExchange::reply_wait: a few of the typical round trips, and no longer than
// half the compute of a round (within_compute, learnt_timeout.hpp), so that a slow
// partner never holds up training; and not at all when the partners' recent round trips
// say their replies will come later than that but before the next round
// (PartnerTiming::wait_is_lost). A reply that
// misses the round is applied whenever it arrives (in a later mix() or in serve()). While
// requests of a previous round are still out, a round starts none (exchanges must not
// overlap: pairwise.hpp) and only takes what has arrived.
//
// Live peers are all PeerSet ids except ours and those currently left out. The PeerSet
// follows membership (set_peers: the peer process gives it every member not dead). A PeerError
// about a peer leaves it out for a while, a request that expired for one expiry horizon
// per consecutive expiry (partner_timing.hpp); hearing from the peer again brings it back
// at once. When no peer is live the round only serves requests until its wait is over; a
// run of one peer returns at once.
//
// options.gossip_every (H) is the caller's: it calls mix() once every H local steps,
// unless round_needed() says no. Without options.always_start_round (on by default) a peer
// whose request from a partner was served since the previous ask skips its round: that
// exchange averaged it already. Each peer then averages about once per step instead of
// about twice (its own round plus the partners' requests it serves), for about 0.55 of
// the traffic, and ends up to a point lower behind a slow peer with a global budget;
// docs/PERFORMANCE.md compares the accuracy of the two.
// With a compressor of differences (--compress topk:P%, randk:P%, sign, int4) each
// exchange is CHOCO-SGD's over copies kept per partner (link_copies.hpp), and moves each
// side by gamma / (k+1) of the difference of the link's copies (gamma = --consensus-step).
// options.overlap and options.weights do not apply.
#pragma once
#include <span>
#include <string_view>
#include <vector>

#include "base/rng.hpp"
#include "gossip/mixing/algorithms/algorithm.hpp"
#include "gossip/mixing/algorithms/pairwise.hpp"

namespace hearsay::algorithms {

class Gossip final : public Algorithm {
 public:
  // Throws std::invalid_argument for a fanout below 1, and for what PairwiseExchange
  // refuses (rank outside the peer set, transport id not ours, timeout not positive).
  Gossip(transport::Transport& transport, PeerSet peers, AlgorithmOptions options);

  std::string_view name() const override { return "gossip"; }
  RoundResult mix(std::span<float> params, std::uint64_t round) override;
  void serve(std::span<float> params, Clock::time_point deadline) override;
  // Partners' requests are answered between our own rounds too.
  bool serves_between_rounds() const noexcept override { return true; }
  // False when !options().always_start_round and a partner's request was served since the
  // previous call: that exchange averaged us already.
  bool round_needed() override;
  // Members came or went: partners are drawn from `peers` from the next round on; requests
  // to peers that stay are kept (PairwiseExchange::set_peers). Throws
  // std::invalid_argument, changing nothing, for a set without this peer.
  void set_peers(PeerSet peers) override;

  // Requests sent and not yet answered or given up; safe from any thread.
  std::size_t outstanding() const noexcept override { return exchange_.outstanding(); }
  const PairwiseCounters& counters() const noexcept { return exchange_.counters(); }
  // With --compress topk:P% (randk:P%, sign, int4): the copies it keeps per partner
  // (link_copies.hpp); null before the first round and without one.
  const LinkCopies* links() const noexcept { return exchange_.links(); }

 private:
  // Up to fanout distinct live partners at random (slow ones less often).
  std::vector<int> choose_partners();
  void list_others();  // others_ from peers_

  PairwiseExchange exchange_;
  Rng rng_;
  std::vector<int> others_;        // every rank but ours
  std::uint64_t served_seen_ = 0;  // counters().served at the previous round_needed()
};

}  // namespace hearsay::algorithms
