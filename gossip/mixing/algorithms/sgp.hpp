// Stochastic Gradient Push (Assran et al. 2019): push-sum averaging over directed or
// time-varying graphs. Every peer holds biased parameters x and a weight w (starting at
// 1); the model's buffer holds the de-biased z = x / w, which converges to the network
// average of the initial values on any strongly connected graph, although the mixing
// matrix is only column-stochastic.
//
// Round r: the local update since the last round, dz, is added to x (as in the paper's
// x -= lr * grad: added as a change, x keeps its double precision when the model did not
// move); x and w are split into
// out_degree + 1 equal shares (over the live out-neighbours of round r whose link is not
// stalled, see kStalledRounds), one kept, one
// sent to each out-neighbour as pushsum_share (payload = its share of x, header weight =
// its share of w); every share that arrives is added to x and w; then z = x / w is
// written back. Without options.overlap the round waits, until the round deadline, for
// every in-neighbour's share of round r and for the acknowledgement of every share it
// sent; with overlap it waits for nothing and adds what has arrived (shares a round or
// more late: the one-step-stale variant). The deadline is learnt: twice the 90th
// percentile of how long recent rounds waited (shares that came after their round
// counted when they came), at least 10 ms, at most the round timeout and half the
// compute of a round (within_compute, learnt_timeout.hpp): push-sum needs no neighbour in time, so a
// slow one is not waited for longer than that, and its share is added when it comes.
//
// Each update weighs the same in the network's sum, whatever the weight of the peer that
// made it: dz is added, not w * dz, so that the average model moves by the mean of the
// steps, as all-reduce's does; z then moves by dz / w. Where w falls below
// 1 / kMaxStepGain (a peer whose shares to departed peers were lost) the update is added
// as kMaxStepGain * w * dz instead, so that z never moves by more than kMaxStepGain * dz.
// A peer left alone (every other peer ended or died) adds w * dz: its z is all the
// network there is, and moves by its own step. (Why, with the runs that showed it:
// docs/PERFORMANCE.md, "sgp's update rules".)
//
// Mass conservation on a lossy transport. A lost share would destroy mass (x and w)
// for good, so shares travel reliably per link: the sender has at most one share
// outstanding per peer, numbered by a sequence number in header.nonce (1, 2, ... per
// link; header.step is the round the share was sent in). The receiver applies a share
// only if its number is the next one (last applied + 1) and acknowledges every share it
// gets, duplicates included, with pushsum_ack (nonce = the sequence number, step = its
// own round). Shares produced while one is outstanding accumulate into a pending
// share, sent as soon as the acknowledgement arrives; an outstanding share that stays
// unacknowledged is re-sent, unchanged, at the first round after its resend timeout: 4x
// the 90th percentile of that link's recent share-to-acknowledgement times (shares sent
// once only), at least 20 ms, at most the round timeout (also while fewer than 4 are
// known). What the receiver decodes is exactly what the sender subtracts:
// the rounding (or compression) error of a share stays with the link, for its next share
// (never in x, not even when the link's peer dies: it has no weight).
//
// Restarts. Sequence numbers belong to a link session (header.session), a random number
// drawn when a Sgp starts. A receiver that sees a session it has not seen on that link
// starts the link from the share at hand: the sender restarted (and numbers from 1
// again), or we did (and know nothing of the numbers before). Shares of a session it left
// are late copies from a sender's earlier life, whose mass died with it: dropped. A
// re-sent share also names the receiver's session when it was first sent, as the sender
// last learnt it from an acknowledgement (header.peer_session): an earlier copy may have
// reached that life, which may have applied it and died before its acknowledgement came.
// A restarted receiver acknowledges such a share but does not apply it (its mass is taken
// as died with that life; applied again it would count twice). A first send is the only
// copy there is, and is applied; so is a re-sent share first sent before any
// acknowledgement of the link (it names no session).
//
// A peer that broke (see PeerHealth) gets no share and is not waited for; the mass
// pending for it, and an outstanding share that no send could hand over, return to our
// x. A share that did leave is lost if the peer is gone for good: mass that dies with
// the peer anyway. A dead peer is offered a share again kRetryRounds rounds later
// (PeerHealth); a transport that accepts a message for a peer still gone loses it.
//
// Cuts. A link whose share stays unacknowledged through kCutResends re-sends and
// kCutRounds rounds is cut (a partition, a peer hung). While one of its out-links is cut, a peer also sends
// shares to the in-neighbours it heard from lately (back_links): on a directed graph a cut leaves sources and
// sinks, and the mass (with it the weight of every update) gathered in the sinks. Receivers take shares from
// any peer of the run, so the way back needs nothing of them.
//
// Memory: x in double (8 bytes per parameter), the last z written (4), and per peer we
// send to, a pending share and the rounding residual in double (16) and the outstanding
// share as encoded.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "gossip/mixing/algorithms/algorithm.hpp"
#include "gossip/mixing/algorithms/learnt_timeout.hpp"
#include "gossip/mixing/algorithms/mailbox.hpp"
#include "gossip/mixing/algorithms/params_exchange.hpp"
#include "gossip/mixing/topology/topology.hpp"

namespace hearsay::algorithms {

class Sgp final : public Algorithm {
 public:
  // A link whose share is unacknowledged this many rounds after it was first sent gets no
  // new share until it is acknowledged. Mass pending for a link gets no updates (they
  // land in x) and arrives stale, so the shorter the better (docs/PERFORMANCE.md, "sgp's
  // update rules").
  static constexpr std::uint64_t kStalledRounds = 1;
  // A link is cut once its share went unacknowledged through kCutResends re-sends and
  // kCutRounds rounds (a partition, a peer gone silent: not a slow or lossy link, whose
  // shares get through within a re-send or two). A peer one of whose out-links is cut
  // also sends shares back to the in-neighbours it heard from within its last kCutRounds rounds,
  // for as long as the cut lasts: see back_links(). A lost share is no cut: links sent back
  // at every one cost accuracy (docs/PERFORMANCE.md, "Why the algorithms' rules are as
  // they are").
  static constexpr std::uint64_t kCutRounds = 8;
  static constexpr int kCutResends = 2;
  // Below this weight a peer sends no shares (it starts at 1; healthy runs stay within a
  // few orders of magnitude of it).
  static constexpr double kMinWeight = 1e-9;
  // The most a local update is amplified in z (see "Each update weighs the same" above):
  // enough for the weights a slow peer's neighbours settle at (about 0.8), not for the
  // deep dips of mass held on slow, lossy links, where twice the step with momentum made
  // peers diverge (docs/PERFORMANCE.md, "Why the algorithms' rules are as they are").
  static constexpr double kMaxStepGain = 1.25;

  // The graph's ranks are peers' indices; std::invalid_argument when the sizes differ.
  Sgp(transport::Transport& transport, PeerSet peers, AlgorithmOptions options,
          const topology::Topology& graph);

  std::string_view name() const override { return "sgp"; }
  RoundResult mix(std::span<float> params, std::uint64_t round) override;
  // Applies and acknowledges arriving shares (and sends pending ones when their link is
  // acknowledged) until the deadline; writes the de-biased values back to params.
  void serve(std::span<float> params, Clock::time_point deadline) override;
  // Prompt acknowledgements between rounds spare the senders a re-send.
  bool serves_between_rounds() const noexcept override { return true; }

  // Introspection for tests and metrics; call only while mix() and serve() are not
  // running. The exact mass in a system of peers is the sum of their biased() and
  // pending() plus each outstanding() share whose receiver's last_applied() from the
  // sender is below its sequence number (the others were applied; their ack is late or lost).
  // Across restarts, a share counts as applied if some life of its receiver applied it
  // (last_applied() in the sender's session()).
  std::span<const double> biased() const noexcept { return x_; }  // x; empty before the first mix
  double weight() const noexcept { return w_; }                   // w
  struct Outstanding {
    std::uint64_t seq = 0;
    std::uint64_t round = 0;  // the round it was first sent in (its step)
    double weight = 0;
    std::vector<float> values;  // as the receiver decodes them
  };
  // The share sent to rank and not acknowledged yet.
  std::optional<Outstanding> outstanding(int rank) const;
  // Mass for rank not sent yet: the pending share (zero between shares; an empty span
  // before the first), and the rounding residual of the shares sent so far (weight 0,
  // added to the next share; empty before the first).
  std::span<const double> pending(int rank) const;
  std::span<const double> residual(int rank) const;
  double pending_weight(int rank) const;
  // Sequence number of the last share applied from rank (0: none; one taken as applied by
  // our life before a restart counts), in the link session applied_session(rank).
  std::uint64_t last_applied(int rank) const;
  std::uint64_t applied_session(int rank) const;
  std::uint64_t session() const noexcept { return session_; }  // ours, on the shares we send
  // How long the next round waits for its in-neighbours' shares (learnt, see above, and
  // at most half the compute of a round): what a test asserts instead of timing rounds.
  Clock::duration round_wait() const;

  struct Counters {
    std::uint64_t shares_sent = 0;   // new shares
    std::uint64_t resent = 0;        // outstanding shares sent again
    std::uint64_t applied = 0;       // shares added to x
    std::uint64_t duplicates = 0;    // shares received again after being applied (acknowledged again)
    std::uint64_t stale = 0;         // shares of a sender's earlier session (before it restarted), dropped
    std::uint64_t restarted = 0;     // links started anew: a sender's new session
    std::uint64_t orphaned = 0;      // shares meant for our life before a restart: acknowledged, not applied
    std::uint64_t acknowledged = 0;  // our shares whose acknowledgement arrived
  };
  Counters counters() const noexcept { return counters_; }

 private:
  // Our side of the shares we send to one peer.
  struct Link {
    std::uint64_t next_seq = 1;
    std::vector<double> pending;   // allocated on first use; zero between shares
    std::vector<double> residual;  // what the encoding of the shares sent rounded away
    double pending_weight = 0;
    bool has_pending = false;
    struct Sent {
      std::uint64_t seq = 0;
      std::uint64_t round = 0;       // step: the round it was first sent in
      std::uint64_t sent_round = 0;  // the round it was last (re-)sent in
      Clock::time_point sent_at{};   // when it was last (re-)sent
      bool resent = false;
      double weight = 0;
      transport::Payload payload;
      bool maybe_delivered = false;  // a send of it succeeded (it may have been applied)
      int resends = 0;               // times it was sent again
      std::uint64_t to_session =
          0;  // the receiver's session when first sent (0: not known), named on re-sends
    };
    std::optional<Sent> outstanding;
    std::uint64_t receiver_session = 0;     // the receiver's, from its last acknowledgement
    RecentDurations acknowledged_after{8};  // share-to-acknowledgement times, shares sent once
  };
  // What we applied from one peer.
  struct Inbound {
    std::uint64_t session = 0;           // the sender's link session last_seq counts in
    std::vector<std::uint64_t> retired;  // its earlier sessions (a few kept)
    std::uint64_t last_seq = 0;
    std::optional<std::uint64_t> last_round;  // largest step applied (the sender's rounds)
    // Our round when we last applied a share from it. Peers' rounds drift apart (by tens
    // of rounds on a loaded machine), so how lately we heard from a peer is counted in ours.
    std::optional<std::uint64_t> applied_in;
  };
  // Records and outcomes of the round (or serve() call) in progress.
  struct Tally {
    std::uint64_t round = 0;
    Clock::time_point start{};
    std::map<int, ExchangeRecord> records;
    std::set<int> applied_from, failed;
  };

  // The in-neighbours that also get a share this round because an out-link of ours is cut
  // (kCutRounds): those heard from lately, whose own link flows, not in live_out. On a
  // directed graph a cut leaves peers that only send and peers that only receive (the
  // exponential graph split in two halves has one of each per half): without the way
  // back, a half's mass gathered in its sink, and the training of the others, whose
  // updates weigh with their weight, counted for next to nothing until the cut healed.
  std::vector<int> back_links(std::uint64_t round, std::span<const int> live_out) const;
  void take_params(std::span<const float> params);
  // Whether every other peer of the run is left out (ended, died): nobody mixes with us.
  bool alone() const;
  void give_params(std::span<float> params);
  void add_pending(int rank, double share);
  // Takes back the mass meant for rank that certainly never reached it: the pending
  // share, and the outstanding one if no send of it succeeded.
  void reclaim(int rank);
  void deliver(int rank, std::uint64_t round);
  void flush(int rank);
  void send_share(int rank, Link::Sent& share, bool resend);
  void handle(const transport::Message& message);
  // Adds the next share from rank to x and w; false (and the peer's record failed) for one
  // of the wrong size or weight, which is neither applied nor acknowledged.
  bool apply(int rank, const transport::Message& message);
  void on_share(const transport::Message& message);
  void on_ack(const transport::Message& message);
  // Non-blocking: handles what has arrived.
  void drain();
  bool round_complete(std::uint64_t round, std::span<const int> in) const;
  void on_peer_error(int rank);
  ExchangeRecord& record_of(int rank);
  void fail(int rank, std::string detail);
  RoundResult end_tally(std::span<const int> in);
  void log_tally();
  // After how long an unacknowledged share to rank is sent again.
  Clock::duration resend_after(int rank) const;

  topology::Topology graph_;
  RankIndex ranks_;
  PeerHealth health_;
  Mailbox mailbox_;
  RecentDurations waits_{32};        // how long complete rounds waited, or late shares came
  Clock::time_point round_start_{};  // of the round in progress (or the last one)
  bool round_completed_ = false;     // whether it had everything before its deadline
  bool initialized_ = false;
  std::uint64_t session_ = 0;  // our link session (nonzero, random)
  std::vector<double> x_;
  double w_ = 1.0;
  std::vector<float> z_written_;  // what the last round wrote to the model's buffer
  std::vector<float> scratch_;    // a share, encoded or decoded
  std::vector<Link> links_;       // by rank
  std::vector<Inbound> inbound_;  // by rank
  std::uint64_t round_ = 0;       // the round in progress (or the last one)
  Tally tally_;
  Counters counters_;
};

}  // namespace hearsay::algorithms
