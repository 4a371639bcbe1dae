// What the graph algorithms (dpsgd, local, sgp) share: the ranks of peer ids, which
// peers broke (PeerHealth), sending that survives a broken peer, the synchronous
// exchange of parameters with one round's neighbours (ParamsExchange), and the
// weighted mix, accumulated in double.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gossip/mixing/algorithms/algorithm.hpp"
#include "gossip/mixing/algorithms/learnt_timeout.hpp"
#include "gossip/mixing/algorithms/mailbox.hpp"
#include "gossip/mixing/topology/topology.hpp"

namespace hearsay::algorithms {


// Peer id -> rank, built once (PeerSet::rank_of is a linear search).
class RankIndex {
 public:
  explicit RankIndex(const PeerSet& peers);
  // The rank of id, or -1 for a peer outside the run.
  int rank_of(const std::string& id) const;

 private:
  std::unordered_map<std::string, int> ranks_;
};

// The peers a graph algorithm stopped talking to. A PeerError saying a peer is gone
// (disconnected, unreachable, refused, unknown) marks it dead: rounds neither send to it
// nor wait for it, so a dead neighbour costs at most one round deadline (the round in
// which it dies) instead of one per round. Any message from it (even a late one) shows
// it is back: it is alive again at once. Sending to it is also tried again kRetryRounds
// rounds after it failed, since a transport that reconnects by itself need not say so
// and a peer that only receives from us could not otherwise show it is back; it is
// waited for only once a message from it has arrived. Errors that only say "not now"
// (backpressure, no_reply) fail the exchange but do not mark the peer.
class PeerHealth {
 public:
  static constexpr std::uint64_t kRetryRounds = 20;
  explicit PeerHealth(int peers) : failures_(static_cast<std::size_t>(peers)) {}

  // Whether round sends nothing to rank.
  bool dead(int rank, std::uint64_t round) const;
  // Whether rounds wait for rank's messages (false from its failure until it is heard from).
  bool awaited(int rank) const { return !failures_.at(static_cast<std::size_t>(rank)); }
  // Records an error naming rank, seen in round; true when it marks rank dead.
  bool on_error(int rank, const transport::PeerError& error, std::uint64_t round);
  void heard_from(int rank) { failures_.at(static_cast<std::size_t>(rank)).reset(); }
  // A message of the sender's round `step` came from rank. After a failure it counts
  // only when the round is past kStaleRounds beyond the failure: the transport delivers
  // a peer's error before the messages it had queued from that peer, and a message sent
  // before the peer died would otherwise bring it back, to be waited for every round
  // (the transport reports a lost peer once).
  void heard_from(int rank, std::uint64_t step);
  static constexpr std::uint64_t kStaleRounds = 2;
  // Why rank is left out ("failed in round 12: peer 'p3' at ...: the endpoint was killed").
  std::string reason(int rank) const;

 private:
  struct Failure {
    std::uint64_t round = 0;
    std::string what;
  };
  std::vector<std::optional<Failure>> failures_;
};

// Sends one message to rank. A PeerError is recorded in health; one that names another
// peer (the transport rethrows pending errors about anyone first) does not stop the send,
// which is tried again. Returns nullopt when sent, else why not. TransportError (our own
// endpoint is broken) passes through.
std::optional<std::string> send_to_rank(transport::Transport& transport, const PeerSet& peers,
                                        const RankIndex& ranks, PeerHealth& health, int rank,
                                        const wire::Header& header, const transport::Payload& payload,
                                        std::uint64_t round);

// Mailbox::wait that outlives PeerErrors: each one is recorded in health (and handed to
// on_error with the rank it names, -1 for a peer outside the run) and the wait goes on.
std::optional<transport::Message> wait_recording_errors(Mailbox& mailbox, const Mailbox::Match& match,
                                                        transport::Deadline deadline, const RankIndex& ranks,
                                                        PeerHealth& health, std::uint64_t round,
                                                        const std::function<void(int rank)>& on_error = {});

// The payload of a parameter message in dtype: f32 borrows `values` (kept alive until
// sent), the others encode them.
transport::Payload params_payload(const AlgorithmOptions& options,
                                  std::shared_ptr<const std::vector<float>> values);

// y = sum_k w[k] * xs[k], accumulated in double with double weights, rounded once to
// float. float weights would not do: 3 x float(1/3) = 1 + 3e-8, which would scale the
// network average by that much every round. y may alias one of xs.
void mix_weighted(std::span<float> y, std::span<const float* const> xs, std::span<const double> w);

// One synchronous exchange of parameters: ours go to the round's out-neighbours as
// params_push with step = round, and the in-neighbours' params_push of the same round
// are awaited until the deadline. Earlier rounds' messages are discarded, later ones
// kept for their round. Logs one ExchangeRecord per neighbour (in or out).
//
// A neighbour whose message for a later round arrives while its message for this round
// is still awaited lost this one on the way (messages between two peers arrive in the
// order they were sent): it is not waited for any longer. So a lost message costs about
// the sender's next step, not a deadline. The deadline is for neighbours that stopped
// (hung, cut off by a partition) and is learnt (round_wait): 4x the median of how long
// recent rounds waited for their last neighbour, counting messages that came
// after their round's deadline at the time they came, so that a deadline too short for
// the link grows. At that deadline, and every learnt wait after it, each neighbour still
// awaited is asked for its parameters again (params_pull: when two neighbours each lost
// the other's message, neither could go on to show it) and pinged (the transport answers
// pings itself, also while the peer computes): one that answers is alive and is waited
// for up to the round timeout, so that a busy machine does not change the result of a
// synchronous round; one that answers nothing until the next probe is left out of the
// round. Parameters of an earlier round from a neighbour, since our last round began, count
// as its answer: it is alive and behind us. A peer whose uplink is slow hears its
// neighbours at once while they wait for it, and runs ahead; its pings then queue behind
// its own parameters on that uplink, and it left every neighbour out as silent and trained
// alone at its own pace (soak seed 46, local SGD: 190 steps against the others' 60, 5.6
// points under the healthy run).
// A neighbour left out as silent in kQuietAfter rounds in a row (cut off by a partition,
// frozen, hung) is quiet: later rounds mix without waiting for it, and probe it at their
// start instead; its parameters are still taken if they come in time, and anything from it
// (parameters of any round, a pong, a pull) ends its quiet. So a neighbour that stays
// unreachable costs two rounds their deadlines, not every round (D-PSGD crawled at
// deadline pace through a whole partition before).
// A params_pull of this round or the last from an out-neighbour of that round is answered
// with our message of that round again; one of a round we skipped (catch_up), with this
// round's message, which shows the asker that we are past it.
class ParamsExchange {
 public:
  ParamsExchange(transport::Transport& transport, const PeerSet& peers, const AlgorithmOptions& options,
                 ExchangeLog& log);

  struct Outcome {
    RoundResult result;
    std::vector<int> arrived;  // in-neighbours whose values are in received(rank), in rank order
    // Of arrived: those back after kApartAfter or more rounds in a row without their
    // parameters (cut off, frozen, dead), and whether this peer itself heard from no
    // in-neighbour in the kApartAfter rounds or more before this one. See kApartAfter.
    std::vector<int> returned;
    bool was_alone = false;
    // What this round mixes: our own values unless we were alone; an arrived neighbour's
    // unless it is back from rounds apart and we were not alone.
    bool mixes_own() const { return !was_alone; }
    bool mixes(int rank) const {
      return was_alone || !std::binary_search(returned.begin(), returned.end(), rank);
    }
  };
  // A peer apart from the others for a while trained alone: by the time it is back its
  // model has drifted from theirs, and averaging the two costs the run accuracy it never
  // fully gets back (soak seed 30: one peer of 8 cut off for 0.85 of 3 epochs, 2 points
  // with D-PSGD; raced ahead by a slow peer's pace, 4). So the first round it is back the
  // mix takes the group's values over the lone peer's: a peer that was alone mixes only
  // what arrived, not its own; the others leave a returning neighbour's values out of that
  // round (the next round it sends what it took from them, and is mixed in as usual). A
  // split into larger groups only mixes a round later.
  static constexpr std::uint32_t kApartAfter = 4;
  // How long a round waits for its in-neighbours before probing them: learnt as above,
  // at least 50 ms, at most a quarter of the round timeout (two probes always fit in a
  // round, so a neighbour that stopped answering is found silent within it); an eighth of
  // the round timeout while fewer than 4 rounds are known.
  Clock::duration round_wait() const;
  // own must stay unchanged until the call returns; it is borrowed by the sends. Returns
  // within two learnt waits, or the round timeout while an awaited neighbour answers pings.
  Outcome run(std::shared_ptr<const std::vector<float>> own, std::uint64_t round, std::span<const int> out,
              std::span<const int> in);
  // The same with a payload the algorithm made (a compressed difference, a whole copy:
  // choco.hpp), sent with `base` (wire::Header::base); own_values: this peer's values, for
  // the size check of what arrives (and the distance, without a taker).
  Outcome run(transport::Payload payload, std::uint64_t base, std::span<const float> own_values,
              std::uint64_t round, std::span<const int> out, std::span<const int> in);
  // A message to send, with its wire::Header::base.
  struct Outgoing {
    transport::Payload payload;
    std::uint64_t base = 0;
  };
  // The same with a message of its own to each out-neighbour (outgoing[k] to out[k]:
  // power_gossip.hpp's projections, one per edge), or one for all (outgoing.size() == 1).
  // std::invalid_argument for another count.
  Outcome run(std::vector<Outgoing> outgoing, std::span<const float> own_values, std::uint64_t round,
              std::span<const int> out, std::span<const int> in);

  // How an algorithm takes a neighbour's message of the round itself instead of having it
  // decoded into received(rank) (CHOCO's copies): `refused` says why it does not fit (the
  // exchange failed), `distance` is what the exchange log records (-1: not known).
  struct Taken {
    std::optional<std::string> refused;
    double distance = -1;
  };
  using Taker = std::function<Taken(const transport::Message& message, int rank)>;
  void take_with(Taker taker) { taker_ = std::move(taker); }
  // Messages of a type the exchange does not use go to handler on arrival (copy_resync).
  void on(wire::MessageType type, Mailbox::Handler handler) { mailbox_.on(type, std::move(handler)); }
  // Sends rank a message of `type` without payload, with step = round; nullopt when sent,
  // else why not (a PeerError recorded in the peer's health).
  std::optional<std::string> send_note(int rank, wire::MessageType type, std::uint64_t round);
  // What rank sent in the last run (valid when rank is in that run's arrived).
  std::span<const float> received(int rank) const;
  // Our values of the last run as its receivers decode them (the payload it sent, decoded):
  // what a compressed mix uses as its own term, so that both sides of a link mix the same
  // numbers. Valid until the next call; std::logic_error before the first run.
  std::span<const float> sent_as_received();
  // The round this peer's round `round` really is. Synchronous rounds that missed each
  // other stay apart for good (each side's message comes after the other side's
  // deadline, so both keep moving at the deadline's pace): a peer that rejoined, or fell
  // behind a round, would never hear its neighbours again. So when an in-neighbour
  // missed our last round and its message for a later round is already here, this peer
  // is behind, and skips ahead to that round; the skip is kept for every later round.
  std::uint64_t catch_up(std::uint64_t round);
  std::uint64_t rounds_skipped() const noexcept { return skipped_; }
  // Our round's parameters sent again because a neighbour asked (params_pull).
  std::uint64_t resent() const noexcept { return resent_; }
  // Whether rank is left out of rounds (a PeerError said it is gone), and why ("" when not).
  bool left_out(int rank) const { return !health_.awaited(rank); }
  std::string left_out_why(int rank) const { return health_.reason(rank); }
  // Silent rounds in a row after which a neighbour is not waited for (see above).
  static constexpr std::uint32_t kQuietAfter = 2;

 private:
  // At the learnt deadline: asks rank for its round's parameters again, and pings it.
  void probe(int rank, std::uint64_t round, std::uint64_t nonce);
  // At a round's start: probes the in-neighbours that are quiet (nonce first_nonce + rank).
  void probe_quiet(std::span<const int> in, std::uint64_t round, std::uint64_t first_nonce);
  // At the start of a round: drops pongs, pulls of rounds before the last and parameters
  // of past rounds (which still say their sender lives, and how long its round waited).
  void discard_stale(std::uint64_t round, Clock::time_point start);
  // After a round: who of `in` came back after kApartAfter rounds apart, and whether we did.
  void note_apart(std::span<const int> in, Outcome& outcome);
  // Sends a neighbour that asked again the message of the round it asked for (ours now, or
  // the last one's).
  void answer_pull(const transport::Message& pull, std::uint64_t round, const wire::Header& header,
                   std::span<const Outgoing> outgoing, std::span<const int> out);

  transport::Transport& transport_;
  const PeerSet& peers_;
  const AlgorithmOptions& options_;
  ExchangeLog& log_;
  RankIndex ranks_;
  PeerHealth health_;
  Mailbox mailbox_;
  std::vector<std::vector<float>> received_;  // by rank
  std::uint64_t skipped_ = 0;                 // rounds skipped by catch_up
  std::vector<int> missed_;                   // in-neighbours that missed the last round's deadline
  std::vector<std::uint32_t>
      silent_rounds_;  // by rank: rounds in a row it was silent (quiet from kQuietAfter)
  std::vector<std::uint32_t> absent_rounds_;  // by rank: rounds in a row it was in `in` and did not arrive
  std::vector<char> behind_;  // by rank: sent parameters of an earlier round since our last round began
  std::uint32_t alone_rounds_ = 0;            // rounds in a row in which no in-neighbour arrived
  RecentDurations waits_{32};                 // how long rounds waited for their last neighbour
  std::uint64_t next_probe_nonce_ = 1;        // of the pings to silent neighbours
  // What the last round sent: a neighbour a round behind may ask for it again.
  struct Sent {
    std::uint64_t round = 0;
    wire::Header header;
    std::vector<Outgoing> outgoing;  // one for all, or one per out-neighbour
    std::vector<int> out;            // whom it went to
  };
  std::optional<Sent> previous_;
  std::vector<float> sent_decoded_;  // sent_as_received()
  std::uint64_t resent_ = 0;
  Taker taker_;                   // take_with
  std::uint64_t last_round_ = 0;  // the last round run, and when it started
  Clock::time_point last_start_{};
};

// The terms of one synchronous mix over a row of W: our own values (own) and each arrived
// in-neighbour's (received(rank)), with the row's weights renormalised over what is mixed
// (a no-op when every neighbour arrived), so the result stays a convex combination. Back
// from rounds alone we take the neighbours' values over ours; a neighbour back from rounds
// apart is mixed in from the next round (ParamsExchange::kApartAfter). With
// Missing::to_self the weights of the neighbours left out go to our own values instead
// (the row is not renormalised): on a symmetric W the peers that mix still keep their sum,
// which tracking and D² need of their second vector (tracking.hpp). std::logic_error
// naming `algorithm` when the weights mixed sum to nothing.
enum class Missing { renormalise, to_self };
struct MixTerms {
  std::vector<const float*> xs;
  std::vector<double> w;
};
MixTerms mix_terms(const ParamsExchange& exchange, const ParamsExchange::Outcome& outcome,
                   const topology::MixingRow& row, std::span<const int> in, const float* own,
                   std::uint64_t round, std::string_view algorithm, Missing missing = Missing::renormalise);

// Values compressed on the wire: our own term becomes x_i + Σ_j w_j (dec x_j − dec x_i),
// our values as the neighbours decoded them (exchange.sent_as_received()) standing in for
// ours in the neighbours' terms, so that a doubly stochastic W keeps the network's sum and
// our own values keep their precision (Dpsgd::mix).
void mix_own_as_decoded(MixTerms& terms, ParamsExchange& exchange);

// What each in-neighbour sent last, and in which round: tracking and D² mix a neighbour
// whose message of this round was lost with its message of a recent round instead of
// leaving it out. The neighbour mixed ours; leaving it out would change the pair's sum by
// w (x_j − x_i), the size of the peers' differences, which on heterogeneous shards is
// their data's pull, every lost message; its last message changes it by one round's move.
class LastHeard {
 public:
  // Keeps the values of every arrived neighbour of the round (exchange.received(rank)).
  void keep(const ParamsExchange& exchange, const ParamsExchange::Outcome& outcome, std::uint64_t round);
  // Adds to `terms` (built with Missing::to_self) each in-neighbour of `in` that did not
  // arrive this round but was heard within kRecentRounds before it, taking its weight
  // from our own.
  void stand_in(MixTerms& terms, const ParamsExchange::Outcome& outcome, const topology::MixingRow& row,
                std::span<const int> in, std::uint64_t round) const;
  static constexpr std::uint64_t kRecentRounds = 2;

 private:
  struct Heard {
    std::uint64_t round = 0;
    std::vector<float> values;
  };
  std::vector<Heard> by_rank_;
};

}  // namespace hearsay::algorithms
