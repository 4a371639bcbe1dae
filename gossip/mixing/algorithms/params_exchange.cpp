#include "gossip/mixing/algorithms/params_exchange.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <utility>

#include "base/log.hpp"
#include "gossip/network/wire/payload.hpp"

namespace hearsay::algorithms {

using transport::Message;

void ParamsExchange::probe_quiet(std::span<const int> in, std::uint64_t round, std::uint64_t first_nonce) {
  // Asked at once, every round: the answer, whenever it comes, ends their quiet
  // (discard_stale, or their parameters in this round).
  for (const int rank : in)
    if (silent_rounds_[static_cast<std::size_t>(rank)] >= kQuietAfter && health_.awaited(rank))
      probe(rank, round, first_nonce + static_cast<std::uint64_t>(rank));
}

void ParamsExchange::probe(int rank, std::uint64_t round, std::uint64_t nonce) {
  // Its parameters again, in case ours or its message was lost on the way (when each lost
  // the other's, neither could go on to show it); then a ping, which the transport
  // answers even while the peer computes. A peer the transport cannot reach answers
  // neither, which is what the probe asks.
  wire::Header pull;
  pull.type = wire::MessageType::params_pull;
  pull.step = round;
  (void)send_to_rank(transport_, peers_, ranks_, health_, rank, pull, {}, round);
  wire::Header ping;
  ping.type = wire::MessageType::ping;
  ping.nonce = nonce;
  ping.step = round;
  (void)send_to_rank(transport_, peers_, ranks_, health_, rank, ping, {}, round);
}

Clock::duration ParamsExchange::round_wait() const {
  // Generous: a synchronous round that leaves out a neighbour which was only slow (the
  // scheduler of a busy machine) gives a different result than one that waited, and a
  // lost message does not need the deadline (see the header).
  // The median, not a high quantile: a round that waited on a neighbour which was itself
  // held up (a lost message elsewhere) says nothing about the link, and such rounds must
  // not set the pace for the probes that resolve them.
  static constexpr TimeoutRule kRule{0.5, 4.0, std::chrono::milliseconds(50), 4};
  // Until enough rounds are known, an eighth of the round timeout: what follows the wait is
  // only a probe (a pull and a ping), which gives up nobody that answers it.
  if (waits_.size() < kRule.min_samples) return options_.round_timeout / 8;
  // At most a quarter of the round timeout, so that two probes fit in a round: rounds that
  // waited for a neighbour which was itself held up teach long waits, and a learnt wait of
  // the whole round timeout never probed, so a stopped neighbour (frozen, its transport
  // still up) was waited for the full timeout every round and never went quiet (local SGD
  // took 28 virtual seconds instead of 4 around one frozen peer).
  return learnt_timeout(waits_, kRule, options_.round_timeout / 4);
}

ParamsExchange::ParamsExchange(transport::Transport& transport, const PeerSet& peers,
                               const AlgorithmOptions& options, ExchangeLog& log)
    : transport_(transport),
      peers_(peers),
      options_(options),
      log_(log),
      ranks_(peers),
      health_(peers.size()),
      mailbox_(transport),
      received_(static_cast<std::size_t>(peers.size())),
      silent_rounds_(static_cast<std::size_t>(peers.size()), 0),
      absent_rounds_(static_cast<std::size_t>(peers.size()), 0),
      behind_(static_cast<std::size_t>(peers.size()), 0) {}

std::uint64_t ParamsExchange::catch_up(std::uint64_t round) {
  // Behind means: an in-neighbour's message for our last round never came, and one of
  // its for a later round is here (it has moved on). A neighbour that is merely ahead
  // (a directed graph lets a peer that does not wait for us run a round early) still
  // sent the round we waited for, and is no reason to skip.
  const std::uint64_t now = round + skipped_;
  std::uint64_t latest = now;
  mailbox_.for_each_held([&](const Message& m) {
    if (m.type() != wire::MessageType::params_push) return;
    const int rank = ranks_.rank_of(m.sender());
    if (rank >= 0 && std::find(missed_.begin(), missed_.end(), rank) != missed_.end())
      latest = std::max(latest, m.header().step);
  });
  if (latest > now) {
    logging::info(std::string("behind the neighbours: skipping from round ") + std::to_string(now) + " to " +
                  std::to_string(latest));
    skipped_ += latest - now;
  }
  return round + skipped_;
}

std::span<const float> ParamsExchange::received(int rank) const {
  return received_.at(static_cast<std::size_t>(rank));
}

void ParamsExchange::discard_stale(std::uint64_t round, Clock::time_point start) {
  mailbox_.discard_if([&](const Message& m) {
    // Anything from a quiet neighbour (a pong to the probe of an earlier round included)
    // shows it is back: this round waits for it again.
    if (const int rank = ranks_.rank_of(m.sender()); rank >= 0)
      silent_rounds_[static_cast<std::size_t>(rank)] = 0;
    if (m.type() == wire::MessageType::pong) return true;  // answers an earlier round's ping
    // Asks for parameters of a round before the last: our messages since show the asker
    // that its round is over for us.
    if (m.type() == wire::MessageType::params_pull) return m.header().step + 1 < round;
    if (m.type() != wire::MessageType::params_push || m.header().step >= round) return false;
    // Too late for its round, but it shows the sender is alive (and behind us), and how long
    // that round would have had to wait.
    if (const int rank = ranks_.rank_of(m.sender()); rank >= 0) {
      health_.heard_from(rank, m.header().step);
      behind_[static_cast<std::size_t>(rank)] = 1;
    }
    if (m.header().step == last_round_ && last_start_ != Clock::time_point{})
      waits_.add(m.received_at() - last_start_);
    return true;
  });
  last_round_ = round;
  last_start_ = start;
}

namespace {

// What goes to rank: its own message, or the one for all; nullptr when rank was sent none.
const ParamsExchange::Outgoing* outgoing_for(std::span<const ParamsExchange::Outgoing> outgoing,
                                             std::span<const int> out, int rank) {
  if (outgoing.size() == 1) return &outgoing.front();
  const auto at = std::find(out.begin(), out.end(), rank);
  return at == out.end() ? nullptr : &outgoing[static_cast<std::size_t>(at - out.begin())];
}

}  // namespace

void ParamsExchange::answer_pull(const Message& pull, std::uint64_t round, const wire::Header& header,
                                 std::span<const Outgoing> outgoing, std::span<const int> out) {
  // It lost our message of that round: once more. A round we skipped (catch_up) we have
  // nothing of: this round's message shows the asker that we are past it.
  const int rank = ranks_.rank_of(pull.sender());
  const bool last = previous_ && pull.header().step == previous_->round && pull.header().step != round;
  const Outgoing* o =
      last ? outgoing_for(previous_->outgoing, previous_->out, rank) : outgoing_for(outgoing, out, rank);
  if (o == nullptr) return;
  wire::Header h = last ? previous_->header : header;
  h.base = o->base;
  if (!send_to_rank(transport_, peers_, ranks_, health_, rank, h, o->payload, round)) ++resent_;
}

namespace {

// One run's bookkeeping, by rank: a record per neighbour (logged in rank order), who
// failed, whose message of the round is expected and who is still awaited, who answered
// the last probe, and who was seen lost on the way or silent.
struct RoundBook {
  std::uint64_t round;
  const PeerSet& peers;
  std::span<const int> out;
  std::map<int, ExchangeRecord> records;
  std::vector<char> failed, expected, waiting, answered;
  std::vector<char> behind;  // sent parameters of an earlier round lately: alive, waited for
  int waiting_count = 0;
  bool probed = false;
  std::uint64_t probe_nonce = 0;
  std::vector<int> lost, silent;  // seen lost on the way; answered neither with parameters nor a ping

  // behind: by rank, who sent parameters of a round before this one since the last began.
  RoundBook(std::uint64_t round, const PeerSet& peers, std::span<const int> out, std::vector<char> behind)
      : round(round),
        peers(peers),
        out(out),
        failed(behind.size(), 0),
        expected(behind.size(), 0),
        waiting(behind.size(), 0),
        answered(behind.size(), 0),
        behind(std::move(behind)) {}

  ExchangeRecord& record_of(int rank) {
    auto [it, inserted] = records.try_emplace(rank);
    if (inserted) {
      it->second.round = round;
      it->second.partner = peers.id_of(rank);
    }
    return it->second;
  }

  void fail(int rank, std::string detail) {
    ExchangeRecord& r = record_of(rank);
    r.outcome = ExchangeRecord::Outcome::failed;
    if (r.detail.empty()) r.detail = std::move(detail);
    failed[static_cast<std::size_t>(rank)] = 1;
  }

  bool stop_waiting(int rank) {
    if (rank < 0 || !waiting[static_cast<std::size_t>(rank)]) return false;
    waiting[static_cast<std::size_t>(rank)] = 0;
    --waiting_count;
    return true;
  }

  // Ours to every out-neighbour that is not dead.
  void send_to_out(transport::Transport& transport, const RankIndex& ranks, PeerHealth& health,
                   wire::Header header, std::span<const ParamsExchange::Outgoing> outgoing) {
    if (outgoing.size() != 1 && outgoing.size() != out.size())
      throw std::invalid_argument("ParamsExchange::run: " + std::to_string(outgoing.size()) +
                                  " messages for " + std::to_string(out.size()) + " out-neighbours");
    for (int rank : out) {
      record_of(rank);
      const auto& o = *outgoing_for(outgoing, out, rank);
      header.base = o.base;
      if (health.dead(rank, round)) {
        fail(rank, "left out: " + health.reason(rank));
      } else if (auto error = send_to_rank(transport, peers, ranks, health, rank, header, o.payload, round)) {
        fail(rank, "send failed: " + *error);
      } else {
        record_of(rank).bytes_sent = o.payload.bytes().size();
      }
    }
  }

  // A dead or quiet in-neighbour is not waited for, but its message is still taken if it
  // comes. silent_rounds: by rank, the rounds in a row it was silent.
  void expect(std::span<const int> in, const PeerHealth& health,
              const std::vector<std::uint32_t>& silent_rounds) {
    for (int rank : in) {
      record_of(rank);
      expected[static_cast<std::size_t>(rank)] = 1;
      const std::uint32_t quiet = silent_rounds[static_cast<std::size_t>(rank)];
      if (!health.awaited(rank)) {
        fail(rank, "left out: " + health.reason(rank));
      } else if (quiet >= ParamsExchange::kQuietAfter) {
        fail(rank, "left out: silent for " + std::to_string(quiet) +
                       " rounds in a row (no parameters, no answer to pings); probed every round");
      } else {
        waiting[static_cast<std::size_t>(rank)] = 1;
        ++waiting_count;
      }
    }
  }

  // This round's messages, and a later round's from a neighbour still awaited: it shows
  // that neighbour's message for this round was lost.
  bool matches(const Message& m, const RankIndex& ranks) const {
    if (m.type() != wire::MessageType::params_push || m.header().step < round) return false;
    const int rank = ranks.rank_of(m.sender());
    if (rank < 0) return false;
    const auto slot = static_cast<std::size_t>(rank);
    return m.header().step == round ? expected[slot] != 0 : waiting[slot] != 0;
  }

  // Also: pongs to our pings, and neighbours asking for this round's parameters again, or
  // the last round's (one that is a round behind waits for a message of ours that was lost
  // while we wait for its next one). last_out: whom the last round sent to, if any.
  bool wanted(const Message& m, const RankIndex& ranks, const std::vector<int>* last_out,
              std::uint64_t last_round) const {
    if (m.type() == wire::MessageType::params_pull) {
      const int rank = ranks.rank_of(m.sender());
      if (rank < 0 || m.header().step > round) return false;
      if (m.header().step == round) return std::find(out.begin(), out.end(), rank) != out.end();
      if (last_out && m.header().step == last_round)
        return std::find(last_out->begin(), last_out->end(), rank) != last_out->end();
      return true;  // a round we skipped: our message of this one shows that we are past it
    }
    if (m.type() == wire::MessageType::params_push && m.header().step < round) {
      const int rank = ranks.rank_of(m.sender());  // behind us: alive (see to_probe)
      return rank >= 0 && waiting[static_cast<std::size_t>(rank)] && !behind[static_cast<std::size_t>(rank)];
    }
    if (m.type() != wire::MessageType::pong) return matches(m, ranks);
    const std::uint64_t k = m.header().nonce - probe_nonce;
    return probed && k < waiting.size() && waiting[k] && m.sender() == peers.id_of(static_cast<int>(k));
  }

  // A learnt wait passed: those that answered nothing since the last probe, and sent
  // nothing of an earlier round lately, are left out; the others are to be asked again (a
  // pull or its answer may be lost too).
  std::vector<int> to_probe() {
    std::vector<int> ask;
    for (int rank = 0; rank < peers.size(); ++rank) {
      const auto slot = static_cast<std::size_t>(rank);
      if (!waiting[slot]) continue;
      if (probed && !answered[slot] && !behind[slot]) {
        stop_waiting(rank);
        silent.push_back(rank);
        continue;
      }
      answered[slot] = 0;
      ask.push_back(rank);
    }
    return ask;
  }

  // Rank's message of another round, while its of this round is awaited. A later round's
  // came first: this round's was lost (the later one is kept for its round). An earlier
  // round's shows rank alive and behind us.
  void other_round(Message message, int rank, PeerHealth& health, Mailbox& mailbox) {
    const std::uint64_t its_round = message.header().step;
    if (its_round > round) {
      seen_lost(rank, its_round);
      mailbox.put_back(std::move(message));
    } else {
      behind[static_cast<std::size_t>(rank)] = 1;
      health.heard_from(rank, its_round);
    }
  }

  // Rank's message of a later round came first: its message of this round was lost.
  void seen_lost(int rank, std::uint64_t its_round) {
    stop_waiting(rank);
    lost.push_back(rank);
    ExchangeRecord& r = record_of(rank);
    r.outcome = ExchangeRecord::Outcome::timed_out;
    r.detail = "its parameters for round " + std::to_string(round) + " were lost: its round " +
               std::to_string(its_round) + " came first";
  }

  // Rank's message of this round, into `into` (or to `taker`, when the algorithm takes
  // messages itself); false when it does not fit our model.
  bool take(Message& message, int rank, std::span<const float> own_values, std::vector<float>& into,
            Clock::time_point start, const ParamsExchange::Taker& taker) {
    ExchangeRecord& r = record_of(rank);
    if (message.count() != own_values.size()) {
      fail(rank, "sent " + std::to_string(message.count()) + " values but this peer has " +
                     std::to_string(own_values.size()) + "; do both run the same model?");
      return false;
    }
    if (taker) {
      const ParamsExchange::Taken taken = taker(message, rank);
      if (taken.refused) {
        fail(rank, *taken.refused);
        return false;
      }
      r.distance = taken.distance;
    } else if (message.header().dtype == wire::Dtype::compressed) {
      fail(rank, "sent a compressed difference, and this peer mixes values: do the peers' --compress agree?");
      return false;
    } else {
      into.resize(own_values.size());
      message.decode_into(into);
      r.distance = l2_distance(own_values, into);
    }
    r.outcome = ExchangeRecord::Outcome::ok;
    failed[static_cast<std::size_t>(rank)] = 0;
    r.bytes_received = message.payload().size();
    r.latency_s = std::chrono::duration<double>(Clock::now() - start).count();
    return true;
  }

  // Logs every record, with those still awaited or silent timed out, and counts them in
  // result; returns the in-neighbours that missed the round.
  std::vector<int> log_records(ExchangeLog& log, RoundResult& result, long long waited_ms) {
    std::vector<int> missed = lost;
    result.timed_out += static_cast<int>(lost.size());
    const auto in_list = [](const std::vector<int>& list, int rank) {
      return std::find(list.begin(), list.end(), rank) != list.end();
    };
    for (auto& [rank, r] : records) {
      if (in_list(lost, rank)) {
        log.record(std::move(r));
        continue;
      }
      if (waiting[static_cast<std::size_t>(rank)] || in_list(silent, rank)) {
        missed.push_back(rank);
        r.outcome = ExchangeRecord::Outcome::timed_out;
        r.detail = "no parameters for round " + std::to_string(round) + " within " +
                   std::to_string(waited_ms) +
                   (in_list(silent, rank) ? " ms, nor an answer to a ping" : " ms (the round timeout)");
        ++result.timed_out;
      } else if (failed[static_cast<std::size_t>(rank)]) {
        ++result.failed;
      }
      log.record(std::move(r));
    }
    return missed;
  }
};

}  // namespace

ParamsExchange::Outcome ParamsExchange::run(std::shared_ptr<const std::vector<float>> own,
                                            std::uint64_t round, std::span<const int> out,
                                            std::span<const int> in) {
  const std::span<const float> own_values(*own);
  return run(params_payload(options_, std::move(own)), 0, own_values, round, out, in);
}

std::optional<std::string> ParamsExchange::send_note(int rank, wire::MessageType type, std::uint64_t round) {
  wire::Header note;
  note.type = type;
  note.step = round;
  return send_to_rank(transport_, peers_, ranks_, health_, rank, note, {}, round);
}

ParamsExchange::Outcome ParamsExchange::run(transport::Payload payload, std::uint64_t base,
                                            std::span<const float> own_values, std::uint64_t round,
                                            std::span<const int> out, std::span<const int> in) {
  std::vector<Outgoing> outgoing;
  outgoing.push_back(Outgoing{std::move(payload), base});
  return run(std::move(outgoing), own_values, round, out, in);
}

ParamsExchange::Outcome ParamsExchange::run(std::vector<Outgoing> outgoing, std::span<const float> own_values,
                                            std::uint64_t round, std::span<const int> out,
                                            std::span<const int> in) {
  const auto start = Clock::now();
  discard_stale(round, start);
  RoundBook book(round, peers_, out, std::exchange(behind_, std::vector<char>(received_.size(), 0)));

  wire::Header header;
  header.type = wire::MessageType::params_push;
  header.step = round;
  book.send_to_out(transport_, ranks_, health_, header, outgoing);
  book.expect(in, health_, silent_rounds_);
  book.probe_nonce = next_probe_nonce_;
  next_probe_nonce_ += received_.size();
  probe_quiet(in, round, book.probe_nonce);
  const auto on_error = [&](int rank) {
    if (rank >= 0 && book.waiting[static_cast<std::size_t>(rank)] && !health_.awaited(rank)) {
      book.stop_waiting(rank);
      book.fail(rank, "left out: " + health_.reason(rank));
    }
  };

  // Waited for until they arrive, or are seen lost (matches), or the learnt deadline. Then,
  // every learnt wait, the neighbours still awaited are probed (asked for their
  // parameters again, and pinged): one that answers is alive (only slow, or its message
  // or ours was lost) and is waited for up to the round timeout, since a synchronous
  // round that leaves it out gives another result than one that waited; one that answers
  // nothing until the next probe (cut off, hung) is left out of the round.
  const auto cap = start + options_.round_timeout;
  transport::Deadline until = std::min(start + round_wait(), cap);
  const std::vector<int>* last_out = previous_ ? &previous_->out : nullptr;
  const std::uint64_t last_round = previous_ ? previous_->round : 0;
  const auto wanted = [&](const Message& m) { return book.wanted(m, ranks_, last_out, last_round); };

  Outcome outcome;
  Clock::duration longest_wait{};
  for (;;) {
    // With nobody left to wait for, only what is already here is taken.
    const transport::Deadline wait_until = book.waiting_count > 0 ? until : Clock::now();
    auto message = wait_recording_errors(mailbox_, wanted, wait_until, ranks_, health_, round, on_error);
    if (!message) {
      if (book.waiting_count == 0 || Clock::now() >= cap) break;
      for (const int rank : book.to_probe())
        probe(rank, round, book.probe_nonce + static_cast<std::uint64_t>(rank));
      book.probed = true;
      until = std::min(Clock::now() + round_wait(), cap);
      continue;
    }
    const int rank = ranks_.rank_of(message->sender());
    const auto slot = static_cast<std::size_t>(rank);
    if (rank >= 0) silent_rounds_[slot] = 0;
    if (message->type() == wire::MessageType::pong) {
      book.answered[slot] = 1;
    } else if (message->type() == wire::MessageType::params_pull) {
      answer_pull(*message, round, header, outgoing, out);
    } else if (message->header().step != round) {
      book.other_round(std::move(*message), rank, health_, mailbox_);
    } else {
      book.expected[slot] = 0;
      book.stop_waiting(rank);
      health_.heard_from(rank, message->header().step);
      longest_wait = std::max(longest_wait, message->received_at() - start);
      if (book.take(*message, rank, own_values, received_[slot], start, taker_))
        outcome.arrived.push_back(rank);
    }
  }
  std::sort(outcome.arrived.begin(), outcome.arrived.end());
  const auto waited_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  // A round that ran into a deadline says only that the wait was longer; the others say
  // how long it was.
  if (book.waiting_count == 0 && book.silent.empty() && !outcome.arrived.empty()) waits_.add(longest_wait);
  missed_ = book.log_records(log_, outcome.result, waited_ms);
  for (const int rank : book.silent) ++silent_rounds_[static_cast<std::size_t>(rank)];
  outcome.result.exchanged = static_cast<int>(outcome.arrived.size());
  note_apart(in, outcome);
  previous_ = Sent{round, header, std::move(outgoing), std::vector<int>(out.begin(), out.end())};
  return outcome;
}

void ParamsExchange::note_apart(std::span<const int> in, Outcome& outcome) {
  for (const int rank : in) {
    std::uint32_t& absent = absent_rounds_[static_cast<std::size_t>(rank)];
    if (!std::binary_search(outcome.arrived.begin(), outcome.arrived.end(), rank)) {
      ++absent;
      continue;
    }
    if (absent >= kApartAfter) outcome.returned.push_back(rank);
    absent = 0;
  }
  if (in.empty()) return;
  if (outcome.arrived.empty()) {
    ++alone_rounds_;
    return;
  }
  const std::uint32_t alone = alone_rounds_;
  outcome.was_alone = alone >= kApartAfter;
  alone_rounds_ = 0;
  if (outcome.was_alone || !outcome.returned.empty())
    logging::info(outcome.was_alone
                      ? "back with the neighbours after " + std::to_string(alone) +
                            " rounds alone: this round takes their parameters over ours"
                      : std::to_string(outcome.returned.size()) +
                            " neighbour(s) back after rounds apart: mixed in from the next round");
}

std::span<const float> ParamsExchange::sent_as_received() {
  if (!previous_) throw std::logic_error("sent_as_received: no round has run yet");
  const transport::Payload& sent = previous_->outgoing.front().payload;
  sent_decoded_.resize(sent.count());
  wire::decode_values(sent.dtype(), sent.bytes(), sent_decoded_);
  return sent_decoded_;
}

}  // namespace hearsay::algorithms
