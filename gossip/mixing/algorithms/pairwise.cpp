#include "gossip/mixing/algorithms/pairwise.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <iterator>
#include <random>
#include <set>
#include <stdexcept>

#include "base/log.hpp"
#include "gossip/mixing/algorithms/choco.hpp"
#include "gossip/network/wire/payload.hpp"
#include "kernels/cpu/vector.hpp"

namespace hearsay::algorithms {

namespace {

using transport::Message;
using transport::Payload;
using wire::MessageType;

// Requests given up whose late replies are still told from stray ones.
constexpr std::size_t kGivenUpKept = 256;
// The weights of one open snapshot may add up to 1 (a peer that forgets its own values
// for its partners' is still a convex combination); this absorbs the rounding of sums
// like 1/3 + 1/3 + 1/3.
constexpr double kWeightSlack = 1e-9;

// x += alpha * (to - from), element by element; `from` may alias x. Both sides of an
// exchange call this with (to, from) swapped and the same alpha, so their changes are
// exact negatives before the final rounding to float. Returns ||to - from||, the
// partner distance, from the same pass.
double add_scaled_difference(std::span<float> x, double alpha, const float* to, const float* from) {
  return std::sqrt(cpu::add_scaled_difference(x.size(), x.data(), alpha, to, from));
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// A shared copy of values, in `spare`'s buffer when nothing but `spare` holds it any more
// (the transport sent it and no request waits for a reply against it).
std::shared_ptr<std::vector<float>> copy_into_spare(std::shared_ptr<std::vector<float>>& spare,
                                                    std::span<const float> values) {
  if (!spare || spare.use_count() != 1) spare = std::make_shared<std::vector<float>>();
  // The transport's last reads of the buffer happen before it dropped its reference;
  // this fence orders them before our writes (use_count() itself is a relaxed load).
  std::atomic_thread_fence(std::memory_order_acquire);
  spare->assign(values.begin(), values.end());
  return spare;
}

// A partner with a compressor of differences (link_copies.hpp) while we send values.
std::string differences_not_values() {
  return "compressed differences, and this peer sends values: do the peers' --compress agree?";
}

bool is_exchange_message(const Message& m) {
  return m.type() == MessageType::params_push || m.type() == MessageType::params_reply;
}

}  // namespace

std::string implausible_values() {
  return "values whose norm is over " + std::to_string(static_cast<int>(kImplausibleNorm)) +
         " times ours (garbage, or a model that blew up)";
}

bool valid_pairwise_alpha(double alpha) noexcept { return std::isfinite(alpha) && alpha > 0 && alpha <= 0.5; }

PairwiseExchange::PairwiseExchange(transport::Transport& transport, const PeerSet& peers,
                                   const AlgorithmOptions& options, ExchangeLog& log,
                                   std::string_view algorithm)
    : transport_(transport),
      peers_(peers),
      options_(options),
      log_(log),
      algorithm_(algorithm),
      mailbox_(transport),
      timing_(peers_, options.round_timeout, algorithm, options.partner_memory) {
  check_peer_set(peers_);
  if (options_.round_timeout <= Clock::duration::zero())
    throw std::invalid_argument(algorithm_ + ": the round timeout must be positive (--round-timeout)");
  if (options_.compress == wire::Dtype::none || !wire::payload_bytes(options_.compress, 1))
    throw std::invalid_argument(algorithm_ + ": payload dtype '" +
                                std::string(wire::to_string(options_.compress)) +
                                "' carries no values; use f32, f16, bf16 or int8 (--compress)");
  if (!options_.compressor.empty()) {
    if (!compress::is_difference_compressor(options_.compressor))
      throw std::invalid_argument(algorithm_ + " --compress " + options_.compressor +
                                  ": pairwise exchanges take a compressor of differences (topk:P%, "
                                  "randk:P%, sign, int4) or values (f16, bf16, int8)");
    gamma_ = options_.consensus_step > 0 ? options_.consensus_step
                                         : default_consensus_step(options_.compressor, /*pairwise=*/true);
    if (!(gamma_ > 0 && gamma_ <= 1))
      throw std::invalid_argument("--consensus-step must be in (0, 1], not " + std::to_string(gamma_));
  }
  // A random start keeps a restarted peer's nonces from matching replies meant for its
  // previous life; partner choices stay seeded, only the nonces are not.
  std::random_device entropy;
  nonce_ = (std::uint64_t{entropy()} << 32 | entropy()) | 1;
}

void PairwiseExchange::check_peer_set(const PeerSet& peers) const {
  if (peers.self < 0 || peers.self >= peers.size())
    throw std::invalid_argument(algorithm_ + ": our rank " + std::to_string(peers.self) +
                                " is outside the peer set of " + std::to_string(peers.size()) +
                                " peers; check --rank and --world");
  if (peers.id_of(peers.self) != transport_.id())
    throw std::invalid_argument(algorithm_ + ": the peer set names rank " + std::to_string(peers.self) +
                                " '" + peers.id_of(peers.self) + "' but the transport's id is '" +
                                transport_.id() + "'; both must be the same peer id");
  if (std::set<std::string>(peers.ids.begin(), peers.ids.end()).size() != peers.ids.size())
    throw std::invalid_argument(algorithm_ +
                                ": the peer set lists a peer id twice; every rank needs its own id");
}

void PairwiseExchange::set_peers(const PeerSet& peers) {
  check_peer_set(peers);
  // A request to a peer that left the set is given up: no reply is taken from it any more.
  for (auto it = outstanding_.begin(); it != outstanding_.end();) {
    const auto next = std::next(it);
    const std::string& id = peers_.id_of(it->second.partner);
    if (peers.rank_of(id) < 0)
      give_up(it, ExchangeRecord::Outcome::failed, "'" + id + "' left the run's peer set (membership)");
    it = next;
  }
  // The others keep their requests, under their ranks in the new set.
  const auto rank_in_new = [&](int rank) { return peers.rank_of(peers_.id_of(rank)); };
  for (auto& [nonce, entry] : outstanding_) entry.partner = rank_in_new(entry.partner);
  std::erase_if(given_up_, [&](const GivenUp& g) { return rank_in_new(g.partner) < 0; });
  for (GivenUp& g : given_up_) g.partner = rank_in_new(g.partner);
  peers_ = peers;  // timing_ reads peers_: it follows
}

std::uint64_t PairwiseExchange::next_nonce() noexcept {
  std::uint64_t n = nonce_++;
  return n != 0 ? n : nonce_++;
}

void PairwiseExchange::check_size(std::span<const float> params) {
  if (!size_known_) {
    size_ = params.size();
    size_known_ = true;
    incoming_.resize(size_);
    if (options_.compress != wire::Dtype::f32) ours_seen_.resize(size_);
    if (!options_.compressor.empty())
      links_ = std::make_unique<LinkCopies>(options_.compressor, size_, compress::sizes_of(options_.tensors));
  } else if (params.size() != size_) {
    throw std::invalid_argument(algorithm_ + ": the parameter buffer has " + std::to_string(params.size()) +
                                " elements but earlier calls had " + std::to_string(size_) +
                                "; every round must mix the same buffer");
  }
}

void PairwiseExchange::begin_round(std::span<const float> params, std::uint64_t round) {
  check_size(params);
  round_ = round;
  in_round_ = true;
  tally_ = {};
  awaited_ = 0;
  expire(Clock::now());
}

void PairwiseExchange::start(std::span<const float> params, const std::vector<int>& partners, double alpha) {
  if (partners.empty()) return;
  if (open())
    throw std::logic_error(algorithm_ + ": a snapshot is still open; its requests must settle first");
  if (!valid_pairwise_alpha(alpha) || alpha * static_cast<double>(partners.size()) > 1.0 + kWeightSlack)
    throw std::invalid_argument(algorithm_ + ": exchange weight " + std::to_string(alpha) + " for " +
                                std::to_string(partners.size()) +
                                " partners is outside (0, 1/2] or adds up to more than 1");
  // One snapshot for all partners, kept as they will decode it (with link copies, each
  // link's request is its own and the snapshot only counts weights).
  Payload payload;
  if (links_) {
    snapshot_ = Snapshot{nullptr, {}, 0.0};
  } else {
    auto values = copy_into_spare(spare_snapshot_, params);
    if (options_.compress == wire::Dtype::f32) {
      payload = Payload::borrow_f32(*values, values);
    } else {
      payload = encode_params(options_, params);
      wire::decode_values(options_.compress, payload.bytes(), *values);
    }
    snapshot_ = Snapshot{values, payload, 0.0};
  }
  wire::Header header;
  header.type = MessageType::params_push;
  header.step = round_;
  header.weight = alpha;
  // A PeerError met while sending may give up requests already sent; the snapshot stays
  // open until every partner was tried.
  starting_ = true;
  for (const int rank : partners) {
    header.nonce = next_nonce();
    if (links_) {
      auto out = links_->request(peers_.id_of(rank), params, header.nonce);
      payload = std::move(out.payload);
      header.base = out.base;
    }
    // Counted before the send so that outstanding() never reads 0 while a request is on
    // its way.
    outstanding_count_.fetch_add(1, std::memory_order_acq_rel);
    const auto sent_at = Clock::now();
    if (auto error = send_to(rank, header, payload)) {
      if (links_) links_->forget(peers_.id_of(rank));  // it may or may not have left
      outstanding_count_.fetch_sub(1, std::memory_order_acq_rel);
      ++counters_.send_failures;
      ++tally_.failed;
      ExchangeRecord record;
      record.round = round_;
      record.partner = peers_.id_of(rank);
      record.outcome = ExchangeRecord::Outcome::failed;
      record.detail = *error;
      log_.record(std::move(record));
      continue;
    }
    outstanding_.emplace(
        header.nonce, Outstanding{rank, round_, alpha, payload.bytes().size(), sent_at, true, header.base});
    snapshot_->weight += alpha;
    ++counters_.started;
    ++awaited_;
  }
  starting_ = false;
  if (outstanding_.empty()) snapshot_.reset();
}

std::optional<std::string> PairwiseExchange::send_to(int rank, const wire::Header& header,
                                                     const Payload& payload) {
  const std::string& id = peers_.id_of(rank);
  // Every failed attempt consumes one pending error of another peer; there are at most a
  // few per peer, so this bound is only a guard against a transport that keeps failing.
  const int max_attempts = 4 * peers_.size() + 4;
  for (int attempt = 0; attempt < max_attempts; ++attempt) {
    try {
      transport_.send(id, header, payload);
      return std::nullopt;
    } catch (const transport::PeerError& e) {
      on_peer_error(e);
      if (e.peer_id() == id) return std::string(e.what());
    }
  }
  return "the transport kept reporting other peers' errors; the message to '" + id + "' was not sent";
}

void PairwiseExchange::pump(std::span<float> params, transport::Deadline deadline,
                            const std::function<bool()>& done) {
  // One queued message is handled even when the deadline has already passed: the Mixer
  // calls serve() with a deadline of "now" whenever a message has arrived, to answer it
  // without waiting for more (and calls again while more are queued).
  bool first = true;
  while (!(done && done()) && (first || Clock::now() < deadline)) {
    first = false;
    std::optional<Message> message;
    try {
      message = mailbox_.wait(is_exchange_message, deadline);
    } catch (const transport::PeerError& e) {
      on_peer_error(e);
      continue;
    }
    if (!message) break;
    dispatch(*message, params);
  }
}

void PairwiseExchange::serve(std::span<float> params, transport::Deadline deadline) {
  check_size(params);
  expire(Clock::now());
  pump(params, deadline);
}

void PairwiseExchange::dispatch(const Message& message, std::span<float> params) {
  if (message.type() == MessageType::params_push)
    answer(message, params);
  else
    apply_reply(message, params);
}

std::string PairwiseExchange::busy_reason(int rank, double beta) const {
  if (!snapshot_) return {};
  for (const auto& [nonce, entry] : outstanding_)
    if (entry.partner == rank && peers_.self < rank)
      return "it awaits our reply to its own request (the higher rank of two peers asking each other serves)";
  if (snapshot_->weight + beta > 1.0 + kWeightSlack)
    return "our open snapshot has given out weight " + std::to_string(snapshot_->weight) + " of 1 already";
  return {};
}

void PairwiseExchange::send_busy(int rank, const Message& request, const std::string& why, bool implausible) {
  wire::Header reply;
  reply.type = MessageType::params_reply;
  reply.nonce = request.header().nonce;
  reply.step = round_;
  reply.weight = 0;
  if (links_)
    reply.base = links_->version(request.sender());  // the asker's link is in doubt unless it matches
  ExchangeRecord record;
  record.round = round_;
  record.partner = request.sender();
  record.bytes_received = request.payload().size();
  record.outcome = implausible ? ExchangeRecord::Outcome::implausible : ExchangeRecord::Outcome::busy;
  record.detail = (implausible ? "refused: " : "answered busy: ") + why;
  if (auto error = send_to(rank, reply, Payload::copy_f32({}))) {
    ++counters_.send_failures;
    record.detail += "; the reply was not sent: " + *error;
  } else if (!implausible) {
    ++counters_.refused_busy;
  }
  log_.record(std::move(record));
}

int PairwiseExchange::admit(const Message& request) {
  const int rank = peers_.rank_of(request.sender());
  if (rank < 0 || rank == peers_.self) {
    // Routine while a peer joins (it knows us before membership told us of it): debug.
    refuse(counters_.refused_sender, "a request from a peer not (yet) in this run's peer set", request.sender(),
           logging::Level::debug);
    return -1;
  }
  timing_.heard_from(rank);
  const double alpha = request.header().weight;
  if (!valid_pairwise_alpha(alpha)) {
    refuse(counters_.refused_alpha, "a request with weight " + std::to_string(alpha) + " outside (0, 1/2]",
           request.sender());
    return -1;
  }
  if (request.count() != size_) {
    refuse(counters_.refused_size,
           "a request of " + std::to_string(request.count()) + " elements for our " + std::to_string(size_),
           request.sender());
    return -1;
  }
  return rank;
}

void PairwiseExchange::answer(const Message& request, std::span<float> params) {
  const int rank = admit(request);
  if (rank < 0) return;
  const double alpha = request.header().weight;
  if (const std::string why = busy_reason(rank, alpha); !why.empty()) {
    send_busy(rank, request, why);
    return;
  }
  if (links_) {
    answer_on_link(request, rank, params);
    return;
  }
  if (request.header().dtype == wire::Dtype::compressed) {
    refuse(counters_.refused_payload, "a request of " + differences_not_values(), request.sender(),
           logging::Level::warn, /*recorded=*/true);
    send_busy(rank, request, differences_not_values(), /*implausible=*/true);
    return;
  }
  const float* theirs = request.values(incoming_).data();
  if (!plausible_partner(params, theirs)) {
    const std::string why = implausible_values();
    refuse(counters_.refused_implausible, "a request with " + why, request.sender(), logging::Level::warn,
           /*recorded=*/true);
    send_busy(rank, request, why, /*implausible=*/true);
    return;
  }
  // Our values as the requester will decode them: those are what we mix with too. While
  // our snapshot is open, they are the snapshot (pairwise.hpp says why).
  Payload payload;
  const float* ours = params.data();
  if (snapshot_) {
    payload = snapshot_->payload;
    ours = snapshot_->values->data();
  } else if (options_.compress == wire::Dtype::f32) {
    auto copy = copy_into_spare(spare_reply_, params);
    payload = Payload::borrow_f32(*copy, copy);
  } else {
    payload = encode_params(options_, params);
    wire::decode_values(options_.compress, payload.bytes(), ours_seen_);
    ours = ours_seen_.data();
  }
  ExchangeRecord record;
  record.round = round_;
  record.partner = request.sender();
  record.bytes_received = request.payload().size();
  record.latency_s = 0;  // the passive side waits for nothing
  wire::Header reply;
  reply.type = MessageType::params_reply;
  reply.nonce = request.header().nonce;
  reply.step = round_;
  reply.weight = alpha;
  const std::uint64_t reply_bytes = payload.bytes().size();
  if (auto error = send_to(rank, reply, payload)) {
    // The requester will never apply its half, so we do not apply ours.
    ++counters_.send_failures;
    record.outcome = ExchangeRecord::Outcome::failed;
    record.detail = "reply not sent: " + *error;
    record.distance = std::sqrt(cpu::squared_distance(size_, ours, theirs));
    log_.record(std::move(record));
    return;
  }
  // `ours` may be params itself (f32, closed): the distance is taken from each element
  // before that element changes.
  record.distance = add_scaled_difference(params, alpha, theirs, ours);
  ++counters_.served;
  ++tally_.served;
  if (snapshot_) {
    snapshot_->weight += alpha;
    ++counters_.served_from_snapshot;
  }
  record.bytes_sent = reply_bytes;
  log_.record(std::move(record));
}

void PairwiseExchange::apply_reply(const Message& reply, std::span<float> params) {
  const auto it = outstanding_.find(reply.header().nonce);
  if (it == outstanding_.end()) {
    late_reply(reply);
    return;
  }
  Outstanding& entry = it->second;
  if (peers_.id_of(entry.partner) != reply.sender()) {
    refuse(counters_.unmatched_replies, "a reply with the nonce of a request to another peer",
           reply.sender());
    return;
  }
  timing_.heard_from(entry.partner);
  if (reply.count() != 0 && reply.count() != size_) {
    // The entry stays: a well-formed reply with this nonce may still come.
    refuse(counters_.refused_size,
           "a reply of " + std::to_string(reply.count()) + " elements for our " + std::to_string(size_),
           reply.sender());
    return;
  }
  timing_.round_trip(entry.partner, reply.received_at() - entry.sent_at);
  if (entry.awaited) --awaited_;
  ExchangeRecord record;
  record.round = entry.round;
  record.partner = reply.sender();
  record.bytes_sent = entry.bytes_sent;
  record.latency_s = seconds(Clock::now() - entry.sent_at);
  if (reply.count() == 0) {
    settle_busy(reply, it, std::move(record));
    return;
  }
  if (links_) {
    apply_reply_on_link(reply, it, std::move(record), params);
    return;
  }
  if (reply.header().dtype == wire::Dtype::compressed) {
    settle_refused(it, std::move(record), counters_.refused_payload, "a reply of " + differences_not_values(),
                   ExchangeRecord::Outcome::failed, "refused: " + differences_not_values());
    return;
  }
  const float* theirs = reply.values(incoming_).data();
  record.bytes_received = reply.payload().size();
  if (!plausible_partner(std::span<const float>(snapshot_->values->data(), size_), theirs)) {
    // The partner applied its half: this exchange moves the network sum, as a reply given
    // up does, which garbage in our buffer would have done far more.
    settle_refused(it, std::move(record), counters_.refused_implausible,
                   "a reply with " + implausible_values(), ExchangeRecord::Outcome::implausible,
                   "refused: " + implausible_values());
    return;
  }
  record.distance = add_scaled_difference(params, entry.alpha, theirs, snapshot_->values->data());
  settle_applied(it, std::move(record));
}

void PairwiseExchange::settle_refused(std::unordered_map<std::uint64_t, Outstanding>::iterator it,
                                      ExchangeRecord record, std::uint64_t& counter, const std::string& what,
                                      ExchangeRecord::Outcome outcome, std::string detail) {
  refuse(counter, what, record.partner, logging::Level::warn, /*recorded=*/true);
  ++tally_.failed;
  record.outcome = outcome;
  record.detail = std::move(detail);
  log_.record(std::move(record));
  settle(it);
}

void PairwiseExchange::settle_applied(std::unordered_map<std::uint64_t, Outstanding>::iterator it,
                                      ExchangeRecord record) {
  const Outstanding& entry = it->second;
  if (!(in_round_ && entry.round == round_)) {
    ++counters_.applied_late;
    record.detail = "late: applied after round " + std::to_string(entry.round) + " had ended";
  }
  ++counters_.applied;
  ++tally_.applied;
  log_.record(std::move(record));
  settle(it);
}

void PairwiseExchange::late_reply(const Message& reply) {
  const auto it = std::find_if(given_up_.begin(), given_up_.end(),
                               [&](const GivenUp& g) { return g.nonce == reply.header().nonce; });
  if (it == given_up_.end() || peers_.id_of(it->partner) != reply.sender()) {
    // Normal for a late reply from a peer that left the peer set meanwhile (its request
    // was given up and forgotten): news, not a warning.
    refuse(counters_.unmatched_replies, "a reply that answers none of our requests", reply.sender(),
           logging::Level::info);
    return;
  }
  // The partner was slower than the expiry: its round trip still teaches the next one.
  timing_.heard_from(it->partner);
  timing_.round_trip(it->partner, reply.received_at() - it->sent_at);
  if (reply.count() != 0) ++counters_.dropped_late;
  logging::debug(algorithm_ + ": dropped a reply from '" + reply.sender() + "' that came " +
                 std::to_string(seconds(Clock::now() - it->sent_at)) +
                 " s after its request, which was given up");
  given_up_.erase(it);
}

void PairwiseExchange::settle(std::unordered_map<std::uint64_t, Outstanding>::iterator it) {
  outstanding_.erase(it);
  outstanding_count_.fetch_sub(1, std::memory_order_acq_rel);
  if (outstanding_.empty() && !starting_) snapshot_.reset();
}

void PairwiseExchange::give_up(std::unordered_map<std::uint64_t, Outstanding>::iterator it,
                               ExchangeRecord::Outcome outcome, std::string detail) {
  const Outstanding& entry = it->second;
  if (entry.awaited) --awaited_;
  if (links_) links_->forget(peers_.id_of(entry.partner));  // it may or may not have taken the request
  ExchangeRecord record;
  record.round = entry.round;
  record.partner = peers_.id_of(entry.partner);
  record.bytes_sent = entry.bytes_sent;
  record.outcome = outcome;
  record.detail = std::move(detail);
  log_.record(std::move(record));
  given_up_.push_back(GivenUp{it->first, entry.partner, entry.sent_at});
  if (given_up_.size() > kGivenUpKept) given_up_.pop_front();
  settle(it);
}

RoundResult PairwiseExchange::end_round() {
  for (auto& [nonce, entry] : outstanding_) entry.awaited = false;
  awaited_ = 0;
  in_round_ = false;
  return RoundResult{tally_.applied + tally_.served, tally_.timed_out, tally_.failed};
}

void PairwiseExchange::expire(Clock::time_point now) {
  for (auto it = outstanding_.begin(); it != outstanding_.end();) {
    const Outstanding& entry = it->second;
    const Clock::duration horizon = timing_.expiry(entry.partner);
    if (now - entry.sent_at < horizon) {
      ++it;
      continue;
    }
    ++counters_.expired;
    ++tally_.timed_out;
    const int partner = entry.partner;
    const auto next = std::next(it);
    give_up(it, ExchangeRecord::Outcome::timed_out,
            "no reply within " + std::to_string(seconds(horizon)) + " s; given up");
    timing_.leave_out_slow(partner);
    it = next;
  }
}

void PairwiseExchange::on_peer_error(const transport::PeerError& error) {
  const int rank = peers_.rank_of(error.peer_id());
  if (rank < 0 || rank == peers_.self) {
    logging::debug(algorithm_ + ": ignoring an error about a peer outside the peer set: " + error.what());
    return;
  }
  timing_.leave_out_broken(rank, error.what(), error.failure() == transport::PeerFailure::left);
  // Its replies are not waited for any longer: the snapshot closes without them.
  for (auto it = outstanding_.begin(); it != outstanding_.end();) {
    const auto next = std::next(it);
    if (it->second.partner == rank) {
      ++tally_.failed;
      give_up(it, ExchangeRecord::Outcome::failed, error.what());
    }
    it = next;
  }
}

void PairwiseExchange::refuse(std::uint64_t& counter, std::string_view what, const std::string& sender,
                              logging::Level level, bool recorded) {
  ++counter;
  if (!recorded) log_.count_refusal();  // visible as exchanges_refused in the metrics
  // Logged on the 1st, 2nd, 4th, 8th... refusal of a kind: a peer sending garbage in a
  // loop cannot flood the log, and the count still shows.
  if (std::has_single_bit(counter))
    logging::write(level, algorithm_ + ": refused " + std::string(what) + " from '" + sender + "' (" +
                              std::to_string(counter) +
                              " refused for this reason so far); the buffer was not touched");
}

}  // namespace hearsay::algorithms
