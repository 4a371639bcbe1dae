// The pairwise exchange behind randomized gossip (gossip.hpp) and AD-PSGD
// (adpsgd.hpp), in delta form so that the sum of all peers' parameters is conserved
// exactly, even when exchanges interleave and replies arrive rounds late.
//
// The initiator A snapshots s = x_A and sends partner B a params_push request (a fresh
// nonce, the header's weight field = alpha, payload s). B, as soon as the request
// arrives (in any wait of its algorithm: its own mix() or serve()), replies params_reply
// with its values y, echoing the nonce, and applies x_B += alpha (s - y). A, when the
// reply arrives (in the same round or in any later mix() or serve()), applies
// x_A += alpha (y - s). A's change is exactly minus B's, so the network sum is conserved.
// k requests started from one snapshot with alpha = 1/(k+1) leave A at the average of
// itself and its k partners once every reply is in.
//
// Why exchanges must not overlap. A's delta alpha (y - s) is taken against its snapshot,
// and everything that changed x_A since is kept. Local steps are meant to be kept (the
// network sum gets each gradient once). Other mixing is not: if A served C's request
// meanwhile, or applied the reply of another request of its own, that move is in
// x_A - s and A's delta adds alpha times it again. Behind a slow partner many exchanges
// overlap, each re-adding a share of the others, and the weights of the resulting mix
// no longer form a convex combination: peers are pushed apart (docs/PERFORMANCE.md,
// "Why the algorithms' rules are as they are"). So every peer keeps at most one *open
// snapshot*:
//   - it opens when the peer sends its requests (all from one snapshot s) and closes
//     once each of them was answered, refused or given up; no request starts while it
//     is open;
//   - while it is open, a partner's request is answered *from the snapshot*: the reply
//     carries s and the peer applies x += beta (s_C - s). The weights of the open
//     snapshot (its requests' alphas plus the betas served) stay at most 1; a request
//     that would exceed that, or one from a partner we await ourselves when our rank is
//     the lower (two peers asking each other would otherwise swap values), gets a busy
//     reply (no values; nobody applies anything);
//   - a closed peer answers from its current values, at once.
// Then every peer's values are, at all times, (1 - sum w) s + sum w_j y_j + its local
// steps, with non-negative weights summing to at most 1, whatever the delays and
// losses: mixing can never push peers apart. Each y_j is itself such a combination, so
// the consensus distance cannot grow by mixing, only by training.
//
// With compressed payloads each side mixes with the values as the other side decodes
// them (A keeps the decoded form of its snapshot, B the decoded form of what it sends),
// so the two changes still cancel.
//
// With a compressor of differences (options.compressor: topk:P%, randk:P%, sign, int4)
// the exchange is CHOCO-SGD's over public copies kept per link (link_copies.hpp): A sends
// the compressed change of its copy on the link to B, B replies with its own, and each
// side moves by gamma alpha (the other's copy − its own), gamma = --consensus-step. The
// open-snapshot rules above still decide who is busy; the snapshot then holds no values.
//
// Conservation needs both halves. B applies its half only once its reply was handed to
// the transport. A gives a request up when no reply came within its expiry (a multiple
// of the partner's recent round trips, partner_timing.hpp), or when the transport says
// the partner broke; a reply that comes after that is dropped and counted, since the
// snapshot it belongs to may have been mixed into since. Its sender did apply its half:
// that exchange moves the network sum, the one place where conservation yields to the
// rule above.
//
// Requests and replies are taken from the Mailbox together and handled as they come, so
// a peer waiting for its own replies keeps answering its partners' requests and two peers
// requesting each other never deadlock. (They are not Mailbox handlers because a passive
// AD-PSGD round must return as soon as it has served one request, and a handler cannot
// end a Mailbox wait.)
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/log.hpp"
#include "gossip/mixing/algorithms/algorithm.hpp"
#include "gossip/mixing/algorithms/link_copies.hpp"
#include "gossip/mixing/algorithms/mailbox.hpp"
#include "gossip/mixing/algorithms/partner_timing.hpp"

namespace hearsay::algorithms {

// What the exchange machinery did since construction.
struct PairwiseCounters {
  std::uint64_t started = 0;               // requests sent
  std::uint64_t served = 0;                // partners' requests answered and applied
  std::uint64_t served_from_snapshot = 0;  // of which while our snapshot was open
  std::uint64_t refused_busy = 0;          // partners' requests answered busy (nothing applied)
  std::uint64_t answered_busy = 0;         // our requests answered busy
  std::uint64_t applied = 0;               // replies applied, in time or late
  std::uint64_t applied_late = 0;          // of which arrived after their round had ended
  std::uint64_t expired = 0;               // requests given up unanswered (PartnerTiming::expiry)
  std::uint64_t dropped_late = 0;          // replies that came after their request was given up
  std::uint64_t send_failures = 0;         // requests or replies the transport refused (PeerError)
  std::uint64_t refused_alpha = 0;         // requests whose weight is not a finite alpha in (0, 1/2]
  std::uint64_t refused_size = 0;          // requests or replies whose element count is not our buffer's
  std::uint64_t refused_sender = 0;        // requests from ids outside the PeerSet (or from ourselves)
  std::uint64_t refused_implausible = 0;   // requests and replies whose values are no model like ours
  std::uint64_t unmatched_replies =
      0;  // replies matching no request of ours (duplicate, forged, or for a peer that left the set)
  // With link copies (--compress topk:P%, ...; link_copies.hpp):
  std::uint64_t links_restarted =
      0;  // links whose two ends were found to disagree: their next exchange is whole
  std::uint64_t refused_payload = 0;  // requests and replies whose compressed payload did not decode
};

class PairwiseExchange {
 public:
  // `algorithm` names the algorithm in log lines. Throws std::invalid_argument for a
  // PeerSet whose self is out of range, a round timeout that is not positive, or a
  // compression dtype that carries no values.
  PairwiseExchange(transport::Transport& transport, const PeerSet& peers, const AlgorithmOptions& options,
                   ExchangeLog& log, std::string_view algorithm);

  // The run's peers changed (Algorithm::set_peers): requests to peers still in `peers`
  // stay open under their new ranks; those to peers that left are given up (failed).
  // Throws std::invalid_argument, changing nothing, for a set the constructor refuses.
  void set_peers(const PeerSet& peers);

  // Starts round `round` of mix(): fixes the buffer size on the first call (later calls
  // with another size throw std::invalid_argument), gives up expired requests and resets
  // the round's tally.
  void begin_round(std::span<const float> params, std::uint64_t round);
  // Whether our snapshot is open (a request of ours is still out): start() must wait.
  bool open() const noexcept { return !outstanding_.empty(); }
  // Opens a snapshot of params and sends a request with weight alpha to each partner
  // rank. A send the transport refuses counts as failed and leaves the partner out.
  // std::logic_error while open().
  void start(std::span<const float> params, const std::vector<int>& partners, double alpha);
  // Answers requests and applies replies as they arrive, until done() (checked after
  // each message) or the deadline; one message already queued is handled even if the
  // deadline has passed. PeerErrors naming a peer leave it out; they do not propagate. A
  // TransportError (our own endpoint is gone) does.
  void pump(std::span<float> params, transport::Deadline deadline, const std::function<bool()>& done = {});
  // Requests of this round that are still awaited (no reply, partner not known broken).
  int awaited() const noexcept { return awaited_; }
  // Partners' requests answered since begin_round().
  int served_this_round() const noexcept { return tally_.served; }
  // Ends the round. Requests still out stay open: their replies are applied whenever
  // they come, until the request expires.
  RoundResult end_round();

  // serve() of the algorithms: answers requests and applies late replies until the deadline.
  void serve(std::span<float> params, transport::Deadline deadline);

  // The candidates (ranks) that are not currently left out, in the given order.
  std::vector<int> live(const std::vector<int>& candidates) const { return timing_.live(candidates); }
  // Up to k of the live candidates, slow partners less often (PartnerTiming::choose).
  std::vector<int> choose(const std::vector<int>& candidates, std::size_t k, Rng& rng) const {
    return timing_.choose(timing_.live(candidates), k, rng);
  }
  // PartnerTiming::bound_first_expiry and floor_typical.
  void bound_first_expiry(Clock::duration guess) { timing_.bound_first_expiry(guess); }
  void floor_typical(Clock::duration floor) { timing_.floor_typical(floor); }
  // How long a round waits for its replies (PartnerTiming::reply_wait).
  Clock::duration reply_wait(Clock::duration compute) const { return timing_.reply_wait(compute); }
  // Whether waiting `wait` for the replies of `partners` is time lost for every one
  // (PartnerTiming::wait_is_lost).
  bool wait_is_lost(const std::vector<int>& partners, Clock::duration wait, Clock::duration compute) const {
    for (const int rank : partners)
      if (!timing_.wait_is_lost(rank, wait, compute)) return false;
    return !partners.empty();
  }

  // Requests sent and neither answered nor given up yet. Safe from any thread.
  std::size_t outstanding() const noexcept { return outstanding_count_.load(std::memory_order_acquire); }
  // From the thread driving the algorithm, or after it stopped.
  const PairwiseCounters& counters() const noexcept { return counters_; }
  // The link copies (a compressor of differences, after the first round), else null.
  const LinkCopies* links() const noexcept { return links_.get(); }

 private:
  struct Outstanding {
    int partner = -1;
    std::uint64_t round = 0;
    double alpha = 0;
    std::uint64_t bytes_sent = 0;
    Clock::time_point sent_at;
    bool awaited = true;     // still counted by its round
    std::uint64_t base = 0;  // with link copies: the link's version the request applies to
  };
  // The open snapshot: s as the partners decode it, the payload that carries it (replies
  // while open send it again), and the weights given out from it so far.
  struct Snapshot {
    std::shared_ptr<const std::vector<float>> values;
    transport::Payload payload;
    double weight = 0;
  };
  // A request given up, remembered so that its late reply is told from a stray one.
  struct GivenUp {
    std::uint64_t nonce = 0;
    int partner = -1;
    Clock::time_point sent_at;
  };
  struct Tally {
    int applied = 0, served = 0, failed = 0, timed_out = 0;
  };

  // std::invalid_argument for a set without us, with another id for us, or an id twice.
  void check_peer_set(const PeerSet& peers) const;
  void check_size(std::span<const float> params);
  void dispatch(const transport::Message& message, std::span<float> params);
  // The requester's rank, or -1 for a request refused (and counted): from outside the
  // set, with a weight outside (0, 1/2] or a count not ours.
  int admit(const transport::Message& request);
  void answer(const transport::Message& request, std::span<float> params);
  // Why a valid request from rank with weight beta cannot be served now (empty: it can).
  std::string busy_reason(int rank, double beta) const;
  // A reply without values (the requester applies nothing): busy, or (implausible) a
  // refusal of the request's values.
  void send_busy(int rank, const transport::Message& request, const std::string& why,
                 bool implausible = false);
  void apply_reply(const transport::Message& reply, std::span<float> params);
  // A reply refused (counted in `counter`, logged as `what`): nothing applied, the request settled.
  void settle_refused(std::unordered_map<std::uint64_t, Outstanding>::iterator it, ExchangeRecord record,
                      std::uint64_t& counter, const std::string& what, ExchangeRecord::Outcome outcome,
                      std::string detail);
  // A reply whose values were applied: counted (late when its round had ended), logged, settled.
  void settle_applied(std::unordered_map<std::uint64_t, Outstanding>::iterator it, ExchangeRecord record);
  // A reply without values: nothing to apply (with link copies, the link stays or is
  // forgotten as its base says).
  void settle_busy(const transport::Message& reply,
                   std::unordered_map<std::uint64_t, Outstanding>::iterator it, ExchangeRecord record);
  // The same with link copies (pairwise_copies.cpp): B's answer, and A's taking of a reply
  // with values.
  void answer_on_link(const transport::Message& request, int rank, std::span<float> params);
  void apply_reply_on_link(const transport::Message& reply,
                           std::unordered_map<std::uint64_t, Outstanding>::iterator it, ExchangeRecord record,
                           std::span<float> params);
  void late_reply(const transport::Message& reply);
  void expire(Clock::time_point now);
  // Ends a request without a reply to apply; `outcome`/`detail` go to the log.
  void give_up(std::unordered_map<std::uint64_t, Outstanding>::iterator it, ExchangeRecord::Outcome outcome,
               std::string detail);
  // Removes a settled request; closes the snapshot with the last one.
  void settle(std::unordered_map<std::uint64_t, Outstanding>::iterator it);
  // Sends to rank; on a PeerError naming rank returns its message (and leaves rank out),
  // on one naming another peer (a pending error rethrown before ours went out) notes it
  // and tries again.
  std::optional<std::string> send_to(int rank, const wire::Header& header, const transport::Payload& payload);
  void on_peer_error(const transport::PeerError& error);
  // Counts (also in the exchange log's totals, unless `recorded`: an exchange record says
  // it already) and logs a refusal on its 1st, 2nd, 4th... occurrence.
  void refuse(std::uint64_t& counter, std::string_view what, const std::string& sender,
              logging::Level level = logging::Level::warn, bool recorded = false);
  std::uint64_t next_nonce() noexcept;

  transport::Transport& transport_;
  PeerSet peers_;
  AlgorithmOptions options_;
  ExchangeLog& log_;
  std::string algorithm_;
  Mailbox mailbox_;
  PartnerTiming timing_;

  std::size_t size_ = 0;
  bool size_known_ = false;
  std::uint64_t round_ = 0;
  bool in_round_ = false;
  std::uint64_t nonce_;
  std::unordered_map<std::uint64_t, Outstanding> outstanding_;  // all from snapshot_
  std::optional<Snapshot> snapshot_;                            // open while outstanding_ is not empty
  bool starting_ = false;                                       // start() is sending
  std::atomic<std::size_t> outstanding_count_{0};
  std::deque<GivenUp> given_up_;  // the most recent ones
  int awaited_ = 0;
  Tally tally_;
  PairwiseCounters counters_;
  std::vector<float> incoming_, ours_seen_;  // scratch buffers for decoded values
  std::unique_ptr<LinkCopies> links_;        // with a compressor of differences, from the first round
  double gamma_ = 1;                         // its consensus step
  // The last buffers handed to the transport (our snapshot, our reply), reused once
  // nobody else holds them: a round then allocates nothing.
  std::shared_ptr<std::vector<float>> spare_snapshot_, spare_reply_;
};

// Whether alpha is a mixing weight a request may carry: finite, in (0, 1/2].
bool valid_pairwise_alpha(double alpha) noexcept;
// What plausible_partner() refuses, for the log and the exchange record.
std::string implausible_values();

}  // namespace hearsay::algorithms
