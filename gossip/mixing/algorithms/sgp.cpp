#include "gossip/mixing/algorithms/sgp.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

#include "base/log.hpp"
#include "gossip/network/wire/payload.hpp"

namespace hearsay::algorithms {

using transport::Message;

namespace {

bool is_pushsum(const Message& m) {
  return m.type() == wire::MessageType::pushsum_share || m.type() == wire::MessageType::pushsum_ack;
}

}  // namespace

Sgp::Sgp(transport::Transport& transport, PeerSet peers, AlgorithmOptions options,
                 const topology::Topology& graph)
    : Algorithm(transport, std::move(peers), options),
      graph_(graph),
      ranks_(peers_),
      health_(peers_.size()),
      mailbox_(transport_),
      links_(static_cast<std::size_t>(peers_.size())),
      inbound_(static_cast<std::size_t>(peers_.size())) {
  check_graph_matches("sgp", graph_, peers_.size());
  std::random_device entropy;
  session_ = (std::uint64_t{entropy()} << 32 | entropy()) | 1;
}

std::optional<Sgp::Outstanding> Sgp::outstanding(int rank) const {
  const Link& link = links_.at(static_cast<std::size_t>(rank));
  if (!link.outstanding) return std::nullopt;
  const Link::Sent& sent = *link.outstanding;
  Outstanding o{sent.seq, sent.round, sent.weight, std::vector<float>(sent.payload.count())};
  wire::decode_values(sent.payload.dtype(), sent.payload.bytes(), o.values);
  return o;
}

std::span<const double> Sgp::pending(int rank) const {
  return links_.at(static_cast<std::size_t>(rank)).pending;
}

std::span<const double> Sgp::residual(int rank) const {
  return links_.at(static_cast<std::size_t>(rank)).residual;
}

double Sgp::pending_weight(int rank) const {
  const Link& link = links_.at(static_cast<std::size_t>(rank));
  return link.has_pending ? link.pending_weight : 0.0;
}

std::uint64_t Sgp::last_applied(int rank) const {
  return inbound_.at(static_cast<std::size_t>(rank)).last_seq;
}

std::uint64_t Sgp::applied_session(int rank) const {
  return inbound_.at(static_cast<std::size_t>(rank)).session;
}

void Sgp::take_params(std::span<const float> params) {
  if (!initialized_) {
    x_.assign(params.begin(), params.end());
    z_written_.assign(params.begin(), params.end());
    w_ = 1.0;
    initialized_ = true;
    return;
  }
  if (params.size() != x_.size())
    throw std::invalid_argument("sgp: the parameter buffer has " + std::to_string(params.size()) +
                                " values but had " + std::to_string(x_.size()) + " in earlier rounds");
  // The local update since we wrote z, added to x as a change: where the model did not
  // move, x keeps the precision that a round trip through float z would lose. It weighs
  // 1 in the network's sum, less only for a peer of little weight (kMaxStepGain) and for
  // one left alone (w: z moves by the step itself).
  const double gain = alone() ? w_ : std::min(1.0, kMaxStepGain * w_);
  for (std::size_t i = 0; i < x_.size(); ++i)
    x_[i] += gain * (static_cast<double>(params[i]) - static_cast<double>(z_written_[i]));
}

bool Sgp::alone() const {
  for (int rank = 0; rank < peers_.size(); ++rank)
    if (rank != peers_.self && health_.awaited(rank)) return false;
  return true;
}

void Sgp::give_params(std::span<float> params) {
  for (std::size_t i = 0; i < x_.size(); ++i) params[i] = static_cast<float>(x_[i] / w_);
  std::copy(params.begin(), params.end(), z_written_.begin());
}

void Sgp::add_pending(int rank, double share) {
  Link& link = links_[static_cast<std::size_t>(rank)];
  if (!link.has_pending) {
    if (link.pending.size() != x_.size()) link.pending.assign(x_.size(), 0.0);
    link.pending_weight = 0;
    link.has_pending = true;
  }
  for (std::size_t i = 0; i < x_.size(); ++i) link.pending[i] += share * x_[i];
  link.pending_weight += share * w_;
}

void Sgp::reclaim(int rank) {
  Link& link = links_[static_cast<std::size_t>(rank)];
  // The pending share; not the rounding residual, which has no weight of its own: added to
  // x it would weigh on x / w in full once our weight has become small (a peer whose
  // shares to departed peers were lost at the end of a run), and z jumped by it. It stays
  // for the link's next share, if there ever is one.
  if (link.has_pending) {
    for (std::size_t i = 0; i < x_.size(); ++i) x_[i] += link.pending[i];
    std::fill(link.pending.begin(), link.pending.end(), 0.0);
    w_ += link.pending_weight;
    link.has_pending = false;
    link.pending_weight = 0;
  }
  // A share no send of which succeeded never left: its mass is still ours, and its
  // sequence number is still the receiver's next.
  if (link.outstanding && !link.outstanding->maybe_delivered) {
    const Link::Sent& sent = *link.outstanding;
    std::vector<float> values(sent.payload.count());
    wire::decode_values(sent.payload.dtype(), sent.payload.bytes(), values);
    for (std::size_t i = 0; i < x_.size(); ++i) x_[i] += static_cast<double>(values[i]);
    w_ += sent.weight;
    link.next_seq = sent.seq;
    link.outstanding.reset();
  }
}

Clock::duration Sgp::round_wait() const {
  static constexpr TimeoutRule kRule{0.9, 2.0, std::chrono::milliseconds(10), 4};
  return within_compute(learnt_timeout(waits_, kRule, options_.round_timeout), compute_per_round());
}

Clock::duration Sgp::resend_after(int rank) const {
  static constexpr TimeoutRule kRule{0.9, 4.0, std::chrono::milliseconds(20), 4};
  return learnt_timeout(links_[static_cast<std::size_t>(rank)].acknowledged_after, kRule,
                        options_.round_timeout);
}

void Sgp::deliver(int rank, std::uint64_t round) {
  Link& link = links_[static_cast<std::size_t>(rank)];
  if (health_.dead(rank, round)) return;
  if (link.outstanding) {
    if (Clock::now() - link.outstanding->sent_at >= resend_after(rank)) {
      link.outstanding->sent_round = round;
      link.outstanding->resent = true;
      ++link.outstanding->resends;
      send_share(rank, *link.outstanding, true);
    }
    return;
  }
  flush(rank);
}

void Sgp::flush(int rank) {
  Link& link = links_[static_cast<std::size_t>(rank)];
  if (!link.has_pending || link.outstanding) return;
  // The share goes out as the receiver will decode it; what the encoding rounds away stays
  // pending, to go out with the link's next share, so that the two add up to exactly what
  // was pending. (Kept in our x instead, a residual of a share built when our weight was
  // large would weigh on x / w in full once our weight has become small.)
  if (link.residual.size() != x_.size()) link.residual.assign(x_.size(), 0.0);
  for (std::size_t i = 0; i < x_.size(); ++i) link.pending[i] += link.residual[i];
  scratch_.resize(x_.size());
  for (std::size_t i = 0; i < x_.size(); ++i) scratch_[i] = static_cast<float>(link.pending[i]);
  transport::Payload payload = options_.compress == wire::Dtype::f32 ? transport::Payload::copy_f32(scratch_)
                                                                     : encode_params(options_, scratch_);
  if (options_.compress != wire::Dtype::f32)
    wire::decode_values(options_.compress, payload.bytes(), scratch_);
  for (std::size_t i = 0; i < x_.size(); ++i) {
    link.residual[i] = link.pending[i] - static_cast<double>(scratch_[i]);
    link.pending[i] = 0;
  }
  link.outstanding = Link::Sent{link.next_seq++,   round_, round_, Clock::now(), false, link.pending_weight,
                                std::move(payload)};
  link.outstanding->to_session = link.receiver_session;
  link.has_pending = false;
  link.pending_weight = 0;
  ++counters_.shares_sent;
  send_share(rank, *link.outstanding, false);
}

void Sgp::send_share(int rank, Link::Sent& share, bool resend) {
  wire::Header header;
  header.type = wire::MessageType::pushsum_share;
  header.step = share.round;
  header.nonce = share.seq;
  header.session = session_;
  header.weight = share.weight;
  // Only a re-sent share can have reached an earlier life of the receiver: a first send's
  // copy is the only one there is.
  if (resend) header.peer_session = share.to_session;
  if (resend) ++counters_.resent;
  if (auto error = send_to_rank(transport_, peers_, ranks_, health_, rank, header, share.payload, round_)) {
    fail(rank, "share " + std::to_string(share.seq) + " not sent: " + *error);
    if (health_.dead(rank, round_)) reclaim(rank);  // invalidates share
    return;
  }
  share.maybe_delivered = true;
  share.sent_at = Clock::now();
  record_of(rank).bytes_sent += share.payload.bytes().size();
}

bool Sgp::apply(int rank, const Message& m) {
  Inbound& in = inbound_[static_cast<std::size_t>(rank)];
  const double weight = m.header().weight;
  if (m.count() != x_.size() || !(weight > 0)) {
    fail(rank, "share of " + std::to_string(m.count()) + " values with weight " + std::to_string(weight) +
                   " (this peer has " + std::to_string(x_.size()) +
                   " values and needs a positive weight); ignored");
    return false;
  }
  scratch_.resize(x_.size());
  m.decode_into(scratch_);
  // One pass: the distance between our de-biased values and the sender's, and the
  // share added to x. Reciprocals and a vectorized sum keep this at memory speed.
  double distance2 = 0;
  const double inv_w = 1.0 / w_, inv_weight = 1.0 / weight;
  const float* share = scratch_.data();
  double* x = x_.data();
  const std::size_t n = x_.size();
#pragma omp simd reduction(+ : distance2)
  for (std::size_t i = 0; i < n; ++i) {
    const double s = static_cast<double>(share[i]);
    const double diff = x[i] * inv_w - s * inv_weight;
    distance2 += diff * diff;
    x[i] += s;
  }
  w_ += weight;
  in.last_seq = m.header().nonce;
  in.last_round = std::max(in.last_round.value_or(0), m.header().step);
  in.applied_in = round_;
  // A share of a round that ran into its deadline: how long that round would have had
  // to wait.
  if (!round_completed_ && m.header().step == round_ && round_start_ != Clock::time_point{})
    waits_.add(m.received_at() - round_start_);
  ++counters_.applied;
  ExchangeRecord& r = record_of(rank);
  r.bytes_received += m.payload().size();
  r.distance = std::sqrt(distance2);
  r.latency_s = std::chrono::duration<double>(Clock::now() - tally_.start).count();
  tally_.applied_from.insert(rank);
  return true;
}

void Sgp::on_share(const Message& m) {
  const int rank = ranks_.rank_of(m.sender());
  if (rank < 0 || rank == peers_.self) return;
  health_.heard_from(rank);
  Inbound& in = inbound_[static_cast<std::size_t>(rank)];
  const std::uint64_t seq = m.header().nonce;
  const std::uint64_t session = m.header().session;
  if (session != in.session && seq != 0) {
    if (std::ranges::find(in.retired, session) != in.retired.end()) {
      ++counters_.stale;  // from the sender's earlier life: its mass died with it
      return;
    }
    // The sender restarted, or we did: the link starts from this share.
    if (in.last_seq != 0) {
      in.retired.push_back(in.session);
      if (in.retired.size() > 4) in.retired.erase(in.retired.begin());
      ++counters_.restarted;
      logging::info("sgp: '" + m.sender() + "' started its link to us anew (it restarted); share " +
                    std::to_string(seq) + " is the next");
    }
    in.session = session;
    in.last_seq = seq - 1;
    in.last_round.reset();
  }
  if (seq == 0 || seq > in.last_seq + 1) {
    // A gap within one session (not this protocol's sender): applying it could count
    // mass twice or skip some, so it is neither applied nor acknowledged.
    fail(rank, "share with sequence number " + std::to_string(seq) + " where " +
                   std::to_string(in.last_seq + 1) + " was next; ignored");
    return;
  }
  if (seq == in.last_seq + 1 && m.header().peer_session != 0 && m.header().peer_session != session_) {
    // Meant for our earlier life (the sender has not heard from us since we restarted),
    // which may have applied an earlier copy before it died: applied again, its mass would
    // count twice. Taken as applied by that life, whose mass died with it; the
    // acknowledgement tells the sender our session, for its next share.
    in.last_seq = seq;
    ++counters_.orphaned;
  } else if (seq == in.last_seq + 1) {
    if (!apply(rank, m)) return;
  } else {
    ++counters_.duplicates;  // applied before; our acknowledgement was lost or late
  }
  wire::Header ack;
  ack.type = wire::MessageType::pushsum_ack;
  ack.nonce = seq;
  ack.session = session;
  ack.step = round_;  // as every reply: the request's nonce, the replier's own step
  ack.peer_session = session_;
  if (auto error = send_to_rank(transport_, peers_, ranks_, health_, rank, ack, {}, round_))
    fail(rank, "acknowledgement not sent: " + *error);
}

void Sgp::on_ack(const Message& m) {
  const int rank = ranks_.rank_of(m.sender());
  if (rank < 0 || rank == peers_.self) return;
  health_.heard_from(rank);
  Link& link = links_[static_cast<std::size_t>(rank)];
  // A late duplicate, or one for our earlier life (session 0: a receiver that does not echo sessions).
  if (!link.outstanding || link.outstanding->seq != m.header().nonce) return;
  if (m.header().session != 0 && m.header().session != session_) return;
  // Only a share sent once times its link: an acknowledgement of a re-sent one could
  // answer either send.
  if (!link.outstanding->resent) link.acknowledged_after.add(m.received_at() - link.outstanding->sent_at);
  if (m.header().peer_session != 0) link.receiver_session = m.header().peer_session;
  link.outstanding.reset();
  ++counters_.acknowledged;
  flush(rank);
}

void Sgp::handle(const Message& m) {
  if (m.type() == wire::MessageType::pushsum_share) {
    on_share(m);
  } else {
    on_ack(m);
  }
}

void Sgp::on_peer_error(int rank) {
  if (rank >= 0 && health_.dead(rank, round_)) {
    reclaim(rank);
    fail(rank, "left out: " + health_.reason(rank));
  }
}

void Sgp::drain() {
  const auto on_error = [this](int rank) { on_peer_error(rank); };
  while (auto m =
             wait_recording_errors(mailbox_, is_pushsum, Clock::now(), ranks_, health_, round_, on_error))
    handle(*m);
}

bool Sgp::round_complete(std::uint64_t round, std::span<const int> in) const {
  for (int rank : in) {
    const Inbound& from = inbound_[static_cast<std::size_t>(rank)];
    if (health_.awaited(rank) && (!from.last_round || *from.last_round < round)) return false;
  }
  for (int rank = 0; rank < peers_.size(); ++rank) {
    const Link& link = links_[static_cast<std::size_t>(rank)];
    if (link.outstanding && link.outstanding->sent_round == round && health_.awaited(rank)) return false;
  }
  return true;
}

ExchangeRecord& Sgp::record_of(int rank) {
  auto [it, inserted] = tally_.records.try_emplace(rank);
  if (inserted) {
    it->second.round = round_;
    it->second.partner = peers_.id_of(rank);
  }
  return it->second;
}

void Sgp::fail(int rank, std::string detail) {
  ExchangeRecord& r = record_of(rank);
  r.outcome = ExchangeRecord::Outcome::failed;
  if (r.detail.empty()) r.detail = std::move(detail);
  tally_.failed.insert(rank);
}

RoundResult Sgp::mix(std::span<float> params, std::uint64_t round) {
  const auto start = Clock::now();
  const auto deadline = start + round_wait();
  take_params(params);
  round_ = round;
  round_start_ = start;
  round_completed_ = options_.overlap;  // with overlap a round waits for nothing
  tally_ = Tally{round, start, {}, {}, {}};
  const auto on_error = [this](int rank) { on_peer_error(rank); };

  drain();  // acknowledgements (and shares) that came since the last round
  const int self = peers_.self;
  for (int rank = 0; rank < peers_.size(); ++rank)
    if (health_.dead(rank, round)) reclaim(rank);

  // One share per live out-neighbour whose link flows, one kept. A link whose share is
  // still unacknowledged kStalledRounds rounds after it was first sent (lost, or a slow
  // link) gets none until it is: its pending share would only pile up, and a peer whose
  // links all stall would otherwise halve its own x and w every round towards underflow.
  // And a peer whose weight fell below kMinWeight (its shares kept leaving while none
  // came in) keeps it all until some come: a share is sent as floats but its weight as a
  // double, so once the values underflow float the weight leaves without them and
  // z = x / w runs off to infinity.
  std::vector<int> live_out;
  for (int rank : graph_.out_neighbours(self, round)) {
    const auto& sent = links_[static_cast<std::size_t>(rank)].outstanding;
    if (health_.dead(rank, round)) {
      fail(rank, "left out: " + health_.reason(rank));
    } else if (!(sent && round >= sent->round + kStalledRounds) && w_ >= kMinWeight) {
      live_out.push_back(rank);
    }
  }
  for (int rank : back_links(round, live_out)) live_out.push_back(rank);
  const double share = 1.0 / static_cast<double>(live_out.size() + 1);
  for (int rank : live_out) add_pending(rank, share);
  for (double& v : x_) v *= share;
  w_ *= share;
  for (int rank = 0; rank < peers_.size(); ++rank)
    if (rank != self) deliver(rank, round);

  const auto& in = graph_.in_neighbours(self, round);
  for (int rank : in)
    if (!health_.awaited(rank)) fail(rank, "left out: " + health_.reason(rank));
  if (options_.overlap) {
    drain();
  } else {
    while (!round_complete(round, in)) {
      auto m = wait_recording_errors(mailbox_, is_pushsum, deadline, ranks_, health_, round, on_error);
      if (!m) break;
      handle(*m);
    }
    if (round_complete(round, in)) {
      round_completed_ = true;
      waits_.add(Clock::now() - start);
    }
  }
  give_params(params);
  return end_tally(in);
}

std::vector<int> Sgp::back_links(std::uint64_t round, std::span<const int> live_out) const {
  const int self = peers_.self;
  bool cut = false;
  for (int rank : graph_.out_neighbours(self, round)) {
    const auto& sent = links_[static_cast<std::size_t>(rank)].outstanding;
    cut = cut || (sent && sent->resends >= kCutResends && round >= sent->round + kCutRounds);
  }
  std::vector<int> back;
  if (!cut || w_ < kMinWeight) return back;
  for (int rank : graph_.in_neighbours(self, round)) {
    const Inbound& from = inbound_[static_cast<std::size_t>(rank)];
    const auto& sent = links_[static_cast<std::size_t>(rank)].outstanding;
    const bool heard = from.applied_in && *from.applied_in + kCutRounds >= round;
    const bool flows = !(sent && round >= sent->round + kStalledRounds);
    if (heard && flows && !health_.dead(rank, round) && std::ranges::find(live_out, rank) == live_out.end())
      back.push_back(rank);
  }
  return back;
}

RoundResult Sgp::end_tally(std::span<const int> in) {
  RoundResult result;
  if (!options_.overlap) {
    const auto waited_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - tally_.start).count();
    for (int rank : in) {
      const Inbound& from = inbound_[static_cast<std::size_t>(rank)];
      if (!health_.awaited(rank) || (from.last_round && *from.last_round >= tally_.round)) continue;
      ExchangeRecord& r = record_of(rank);
      if (r.outcome != ExchangeRecord::Outcome::ok) continue;
      r.outcome = ExchangeRecord::Outcome::timed_out;
      r.detail = "no share of round " + std::to_string(tally_.round) + " within " +
                 std::to_string(waited_ms) + " ms (the round deadline)";
      ++result.timed_out;
    }
  }
  result.exchanged = static_cast<int>(tally_.applied_from.size());
  for (int rank : tally_.failed)
    if (!tally_.applied_from.contains(rank)) ++result.failed;
  log_tally();
  return result;
}

void Sgp::log_tally() {
  for (auto& [rank, r] : tally_.records) log_.record(std::move(r));
  tally_.records.clear();
}

void Sgp::serve(std::span<float> params, Clock::time_point deadline) {
  // Between rounds most arrivals are acknowledgements, which leave x alone: the two
  // passes over the buffer (x = w * z in, z = x / w out) are made only once a share or
  // a peer's failure is about to change x.
  bool taken = false;
  const auto take_once = [&] {
    if (!taken) take_params(params);
    taken = true;
  };
  tally_ = Tally{round_, Clock::now(), {}, {}, {}};
  const auto on_error = [&](int rank) {
    take_once();
    on_peer_error(rank);
  };
  while (auto m = wait_recording_errors(mailbox_, is_pushsum, deadline, ranks_, health_, round_, on_error)) {
    if (m->type() == wire::MessageType::pushsum_share) take_once();
    handle(*m);
  }
  if (taken) give_params(params);
  log_tally();
}

}  // namespace hearsay::algorithms
