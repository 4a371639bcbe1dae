// The pairwise exchange behind randomized gossip (gossip_sgd.hpp) and AD-PSGD
// (adpsgd.hpp), in delta form so that the sum of all peers' parameters is conserved
// exactly, even when exchanges interleave and replies arrive rounds late.
//
// The initiator A snapshots s = x_A and sends partner B a params_push request (a fresh
// nonce, the header's weight field = alpha, payload s). B, as soon as the request
// arrives (in any wait of its algorithm: its own mix() or serve()), replies params_reply
// with its current x_B, echoing the nonce, and applies x_B += alpha (s - x_B). A, when
// the reply arrives (in the same round or in any later mix() or serve()), applies
// x_A += alpha (x_B - s). A's change is exactly minus B's, whatever else happened to
// either buffer meanwhile, so the network sum is conserved. k requests started from one
// snapshot with alpha = 1/(k+1) leave A at the average of itself and its k partners once
// every reply is in.
//
// With compressed payloads each side mixes with the values as the other side decodes
// them (A keeps the decoded form of its snapshot, B the decoded form of the x_B it
// sends), so the two changes still cancel.
//
// Conservation needs both halves. B applies its half only once its reply was handed to
// the transport; a reply that never reaches A (A died, or the reply came after A gave the
// request up, kExpiryRounds round deadlines after sending it) leaves B's half alone. Both
// are counted.
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
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gossip/algorithms/algorithm.hpp"
#include "gossip/algorithms/mailbox.hpp"
#include "gossip/log.hpp"

namespace hearsay::gossip {

// What the exchange machinery did since construction.
struct PairwiseCounters {
  std::uint64_t started = 0;         // requests sent
  std::uint64_t served = 0;          // partners' requests answered and applied
  std::uint64_t applied = 0;         // replies applied, in time or late
  std::uint64_t applied_late = 0;    // of which arrived after their round had ended
  std::uint64_t expired = 0;         // requests given up unanswered after kExpiryRounds round deadlines
  std::uint64_t send_failures = 0;   // requests or replies the transport refused (PeerError)
  std::uint64_t refused_alpha = 0;   // requests whose weight is not a finite alpha in (0, 1/2]
  std::uint64_t refused_size = 0;    // requests or replies whose element count is not our buffer's
  std::uint64_t refused_sender = 0;  // requests from ids outside the PeerSet (or from ourselves)
  std::uint64_t unmatched_replies =
      0;  // replies matching no outstanding request (expired, duplicate, forged)
};

class PairwiseExchange {
 public:
  // An unanswered request is given up after this many round deadlines.
  static constexpr int kExpiryRounds = 10;
  // A peer that broke (PeerError) is left out of partner choices for this many round
  // deadlines; one that timed out for one deadline per consecutive timeout, up to this.
  static constexpr int kRetryRounds = 10;

  // `algorithm` names the algorithm in log lines. Throws std::invalid_argument for a
  // PeerSet whose self is out of range, a round timeout that is not positive, or a
  // compression dtype that carries no values.
  PairwiseExchange(transport::Transport& transport, const PeerSet& peers, const AlgorithmOptions& options,
                   ExchangeLog& log, std::string_view algorithm);

  // Starts round `round` of mix(): fixes the buffer size on the first call (later calls
  // with another size throw std::invalid_argument), gives up expired requests and resets
  // the round's tally.
  void begin_round(std::span<const float> params, std::uint64_t round);
  // Sends a request with weight alpha to each partner rank, all from one snapshot of
  // params. A send the transport refuses counts as failed and leaves the partner out.
  void start(std::span<const float> params, const std::vector<int>& partners, double alpha);
  // Answers requests and applies replies as they arrive, until done() (checked after
  // each message) or the deadline; one message already queued is handled even if the
  // deadline has passed. PeerErrors naming a peer leave it out; they do not propagate. A TransportError (our
  // own endpoint is gone) does.
  void pump(std::span<float> params, transport::Deadline deadline, const std::function<bool()>& done = {});
  // Requests of this round that are still awaited (no reply, partner not known broken).
  int awaited() const noexcept { return awaited_; }
  // Partners' requests answered since begin_round().
  int served_this_round() const noexcept { return tally_.served; }
  // Ends the round: requests still awaited count as timed out and their partners are left
  // out for a while (their replies are still applied whenever they arrive).
  RoundResult end_round();

  // serve() of the algorithms: answers requests and applies late replies until the deadline.
  void serve(std::span<float> params, transport::Deadline deadline);

  // The candidates (ranks) that are not currently left out, in the given order.
  std::vector<int> live(const std::vector<int>& candidates) const;

  // Requests sent and neither answered nor given up yet. Safe from any thread.
  std::size_t outstanding() const noexcept { return outstanding_count_.load(std::memory_order_acquire); }
  // From the thread driving the algorithm, or after it stopped.
  const PairwiseCounters& counters() const noexcept { return counters_; }

 private:
  struct Outstanding {
    int partner = -1;
    std::uint64_t round = 0;
    double alpha = 0;
    // s_A as the partner decodes it; shared by the requests of one round.
    std::shared_ptr<const std::vector<float>> snapshot;
    std::uint64_t bytes_sent = 0;
    Clock::time_point sent_at;
    bool awaited = true;  // still counted by its round
    std::string failure;  // the PeerError that named the partner meanwhile, if any
  };
  struct Exclusion {
    Clock::time_point until{};
    int strikes = 0;
  };
  struct Tally {
    int applied = 0, served = 0, failed = 0, timed_out = 0;
  };

  void check_size(std::span<const float> params);
  void dispatch(const transport::Message& message, std::span<float> params);
  void answer(const transport::Message& request, std::span<float> params);
  void apply_reply(const transport::Message& reply, std::span<float> params);
  void expire(Clock::time_point now);
  // Sends to rank; on a PeerError naming rank returns its message (and leaves rank out),
  // on one naming another peer (a pending error rethrown before ours went out) notes it
  // and tries again.
  std::optional<std::string> send_to(int rank, const wire::Header& header, const transport::Payload& payload);
  void on_peer_error(const transport::PeerError& error);
  void leave_out_broken(int rank, std::string_view why, bool left = false);
  void leave_out_slow(int rank);
  void heard_from(int rank);
  void refuse(std::uint64_t& counter, std::string_view what, const std::string& sender,
              logging::Level level = logging::Level::warn);
  std::uint64_t next_nonce() noexcept;
  void erase(std::unordered_map<std::uint64_t, Outstanding>::iterator it);

  transport::Transport& transport_;
  PeerSet peers_;
  AlgorithmOptions options_;
  ExchangeLog& log_;
  std::string algorithm_;
  Mailbox mailbox_;

  std::size_t size_ = 0;
  bool size_known_ = false;
  std::uint64_t round_ = 0;
  bool in_round_ = false;
  std::uint64_t nonce_;
  std::unordered_map<std::uint64_t, Outstanding> outstanding_;
  std::atomic<std::size_t> outstanding_count_{0};
  std::vector<Exclusion> excluded_;  // by rank
  int awaited_ = 0;
  Tally tally_;
  PairwiseCounters counters_;
  std::vector<float> incoming_, ours_seen_;  // scratch buffers for decoded values
  // The last buffers handed to the transport (our snapshot, our reply), reused once
  // nobody else holds them: a round then allocates nothing.
  std::shared_ptr<std::vector<float>> spare_snapshot_, spare_reply_;
};

// Whether alpha is a mixing weight a request may carry: finite, in (0, 1/2].
bool valid_pairwise_alpha(double alpha) noexcept;

}  // namespace hearsay::gossip
