#include "gossip/mixing/algorithms/allreduce.hpp"

#include <algorithm>
#include <chrono>
#include <deque>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <stdexcept>

#include "base/log.hpp"
#include "gossip/network/wire/payload.hpp"
#include "kernels/cpu/vector.hpp"

namespace hearsay::algorithms {

using transport::Message;
using transport::Payload;
using transport::PeerError;
using transport::PeerFailure;
using wire::MessageType;

namespace {

// How often a peer whose successor pushes back (its send queue is full) tries again. The
// transport has no "room again" notification for senders, so this is a bounded poll.
constexpr auto kRetryInterval = std::chrono::milliseconds(1);

std::string ms_text(Clock::duration d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count()) + " ms";
}

// Messages a predecessor may legitimately have sent ahead of us: it needs our chunks to
// get more than one round ahead, so one round of its chunks (2n steps of at most
// segment / chunk + 1 chunks) for the largest buffer the wire allows, plus slack for
// pongs and strays. Anything beyond is discarded by the mailbox, oldest first.
std::size_t held_capacity(int n, std::size_t chunk_elements) {
  const std::uint64_t segment = (wire::kMaxElements + static_cast<std::uint64_t>(n) - 1) / n;
  const std::uint64_t per_step = segment / chunk_elements + 2;
  const std::uint64_t steps = 2 * static_cast<std::uint64_t>(n);
  const std::uint64_t limit = std::numeric_limits<std::size_t>::max() / 2;
  return static_cast<std::size_t>(std::min(limit, per_step * steps + 64));
}

// The failures that say a peer is gone, not just busy.
bool means_gone(PeerFailure f) {
  return f == PeerFailure::disconnected || f == PeerFailure::left || f == PeerFailure::unreachable ||
         f == PeerFailure::refused;
}

// e.what() without its "peer 'X' at ADDR: " prefix (the caller names the peer itself).
std::string reason_of(const PeerError& e) {
  const std::string what = e.what();
  const std::string prefix = "peer '" + e.peer_id() + "' at " + e.address() + ": ";
  const std::string rest = what.starts_with(prefix) ? what.substr(prefix.size()) : what;
  return std::string(transport::to_string(e.failure())) + ": " + rest;
}

}  // namespace

struct RingAllReduce::Round {
  struct Outgoing {
    std::uint64_t step = 0;
    std::size_t offset = 0;
    Payload payload;
  };
  std::uint64_t round = 0;
  std::uint64_t step_base = 0;  // round * 2n
  Clock::time_point start;
  Clock::time_point last_progress;  // the last chunk that arrived or left
  std::uint64_t bytes_sent = 0, bytes_received = 0;
  std::deque<Outgoing> outgoing;    // chunks the successor has not taken yet
  bool warned = false;              // about a PeerError that turned out transient
  std::vector<PeerError> said_bye;  // peers that left cleanly during the round
};

RingAllReduce::RingAllReduce(transport::Transport& transport, PeerSet peers, AlgorithmOptions options,
                             std::size_t chunk_elements)
    : Algorithm(transport, std::move(peers), options),
      chunk_elements_(chunk_elements),
      n_(peers_.size()),
      rank_(peers_.self),
      mailbox_(transport, held_capacity(std::max(n_, 1), std::max<std::size_t>(chunk_elements, 1))) {
  if (std::set<std::string>(peers_.ids.begin(), peers_.ids.end()).size() != peers_.ids.size())
    throw std::invalid_argument("allreduce: peer ids must be unique (a ring by rank needs one id per rank)");
  if (peers_.id_of(rank_) != transport.id())
    throw std::invalid_argument("allreduce: rank " + std::to_string(rank_) + " is '" + peers_.id_of(rank_) +
                                "' but the transport is '" + transport.id() + "'");
  if (chunk_elements_ == 0) throw std::invalid_argument("allreduce: chunk_elements must be at least 1");
  switch (options_.compress) {
    case wire::Dtype::f32:
    case wire::Dtype::f16:
    case wire::Dtype::bf16:
    case wire::Dtype::int8:
      break;
    default:
      throw std::invalid_argument("allreduce: compress must be f32, f16, bf16 or int8, not " +
                                  std::string(wire::to_string(options_.compress)));
  }
  successor_ = peers_.id_of((rank_ + 1) % n_);
  predecessor_ = peers_.id_of((rank_ + n_ - 1) % n_);
  // Random, so that pongs meant for an earlier life of this peer (or for requests the
  // transport made itself) do not match our probes.
  std::random_device entropy;
  probe_nonce_ = (std::uint64_t{entropy()} << 32) | entropy();
}

RingAllReduce::Segment RingAllReduce::segment(std::size_t size, int index) const {
  const auto n = static_cast<std::size_t>(n_), i = static_cast<std::size_t>(index);
  const std::size_t base = size / n, extra = size % n;
  const std::size_t begin = i * base + std::min(i, extra);
  return {begin, begin + base + (i < extra ? 1 : 0)};
}

RoundResult RingAllReduce::mix(std::span<float> params, std::uint64_t round) {
  // Unequal shards are weighed by the Mixer, which scales each peer's steps by its share
  // (mixer.hpp): the plain average of the scaled models is the average over examples.
  sum(params, round);
  // A true division (not a multiplication by 1/n) so that the average of an exact sum is
  // the correctly rounded average.
  const auto n = static_cast<float>(n_);
  for (float& x : params) x /= n;
  return RoundResult{n_ - 1, 0, 0};
}

void RingAllReduce::sum(std::span<float> data, std::uint64_t round) {
  if (last_round_ && round <= *last_round_)
    throw std::invalid_argument("allreduce: round " + std::to_string(round) + " after round " +
                                std::to_string(*last_round_) + "; rounds must increase from call to call");
  const std::uint64_t steps = 2 * static_cast<std::uint64_t>(n_);
  // The wire step is round * 2n + ring step, and stale-message checks look a round ahead.
  if (round > std::numeric_limits<std::uint64_t>::max() / steps - 2)
    throw std::invalid_argument("allreduce: round " + std::to_string(round) + " is too large for " +
                                std::to_string(n_) + " peers (the wire step would overflow)");
  last_round_ = round;
  if (n_ == 1) return;  // the sum of one buffer is itself

  Round r;
  r.round = round;
  r.step_base = round * steps;
  r.start = r.last_progress = Clock::now();
  discard_stale(r.step_base);
  run_ring(data, r);
  record(r, ExchangeRecord::Outcome::ok, "");
}

void RingAllReduce::record(const Round& r, ExchangeRecord::Outcome outcome, std::string detail) {
  ExchangeRecord record;
  record.round = r.round;
  record.partner = successor_;
  record.outcome = outcome;
  record.bytes_sent = r.bytes_sent;
  record.bytes_received = r.bytes_received;
  record.latency_s = std::chrono::duration<double>(Clock::now() - r.start).count();
  record.detail = std::move(detail);  // distance stays -1: the sum has no partner to compare with
  log_.record(std::move(record));
}

void RingAllReduce::discard_stale(std::uint64_t step_base) {
  // Keep only the predecessor's chunks of this round and the next (it may be ahead of
  // us); the rest is left over from earlier rounds, late pongs, or junk.
  const std::uint64_t end = step_base + 4 * static_cast<std::uint64_t>(n_);
  mailbox_.discard_if([&](const Message& m) {
    return m.type() != MessageType::allreduce_chunk || m.sender() != predecessor_ ||
           m.header().step < step_base || m.header().step >= end;
  });
}

void RingAllReduce::run_ring(std::span<float> data, Round& r) {
  const Segment own = segment(data.size(), rank_);
  for (std::size_t offset = own.begin; offset < own.end; offset += chunk_elements_) {
    const auto values = data.subspan(offset, std::min(chunk_elements_, own.end - offset));
    queue_send(r, r.step_base, offset,
               options_.compress == wire::Dtype::f32 ? Payload::copy_f32(values)
                                                     : encode_params(options_, values, offset, data.size()));
  }
  for (int ring_step = 0; ring_step <= 2 * n_ - 3; ++ring_step) receive_step(data, r, ring_step);
  // The last chunks must have left before the caller may change the buffer again (the
  // payloads are copies, but a queued one still has to reach the successor).
  for (;;) {
    try {
      if (flush(r)) return;
      (void)mailbox_.wait([](const Message&) { return false; },
                          std::min(r.last_progress + options_.round_timeout, Clock::now() + kRetryInterval));
    } catch (const PeerError& e) {
      on_peer_error(r, e);
    }
    if (Clock::now() >= r.last_progress + options_.round_timeout)
      fail_stalled(r, "peer " + successor_ + " to take " + std::to_string(r.outgoing.size()) +
                          " more chunks (it pushes back)");
  }
}

void RingAllReduce::receive_step(std::span<float> data, Round& r, int ring_step) {
  const bool reducing = ring_step < n_ - 1;
  const int gather_step = ring_step - (n_ - 1);
  const int index = ((reducing ? rank_ - ring_step - 1 : rank_ - gather_step) % n_ + n_) % n_;
  const Segment seg = segment(data.size(), index);
  const std::uint64_t step = r.step_base + static_cast<std::uint64_t>(ring_step);
  const bool forward = ring_step < 2 * n_ - 3;
  for (std::size_t cursor = seg.begin; cursor < seg.end;) {
    Message m = await_chunk(r, step, cursor);
    const std::uint64_t offset = m.header().offset, count = m.count();
    if (offset != cursor || count == 0 || count > seg.end - cursor) {
      const std::string detail =
          "allreduce round " + std::to_string(r.round) + ": peer " + predecessor_ + " sent elements [" +
          std::to_string(offset) + ", " + std::to_string(offset + count) + ") in ring step " +
          std::to_string(ring_step) + ", but elements from " + std::to_string(cursor) + " up to " +
          std::to_string(seg.end) + " (segment " + std::to_string(index) + " of a buffer of " +
          std::to_string(data.size()) +
          ") were due: the peers' buffer sizes differ, a chunk was lost, or the peer is faulty";
      record(r, ExchangeRecord::Outcome::failed, detail);
      throw std::runtime_error(detail);
    }
    r.bytes_received += m.payload().size();
    const auto region = data.subspan(offset, count);
    if (reducing) {
      if (scratch_.size() < count) scratch_.resize(count);
      const std::span<float> incoming(scratch_.data(), count);
      m.decode_into(incoming);
      cpu::add(count, incoming.data(), region.data());
      Payload out = options_.compress == wire::Dtype::f32
                        ? Payload::copy_f32(region)
                        : encode_params(options_, region, offset, data.size());
      // The last reduce-scatter step finishes this chunk: keep exactly what the others
      // will decode from it, so that every peer ends with the same values.
      if (ring_step == n_ - 2 && options_.compress != wire::Dtype::f32)
        wire::decode_values(out.dtype(), out.bytes(), region);
      queue_send(r, step + 1, offset, std::move(out));
    } else {
      m.decode_into(region);
      // Passed on byte for byte: re-encoding decoded values need not give the same bytes.
      if (forward)
        queue_send(r, step + 1, offset,
                   Payload::encoded(m.header().dtype, count,
                                    std::vector<std::uint8_t>(m.payload().begin(), m.payload().end())));
    }
    cursor += count;
  }
}

void RingAllReduce::queue_send(Round& r, std::uint64_t step, std::size_t offset, Payload payload) {
  r.outgoing.push_back(Round::Outgoing{step, offset, std::move(payload)});
}

bool RingAllReduce::flush(Round& r) {
  while (!r.outgoing.empty()) {
    const Round::Outgoing& out = r.outgoing.front();
    wire::Header header;
    header.type = MessageType::allreduce_chunk;
    header.step = out.step;
    header.offset = out.offset;
    try {
      transport_.send(successor_, header, out.payload);
    } catch (const PeerError& e) {
      if (e.peer_id() == successor_ && e.failure() == PeerFailure::backpressure) return false;
      throw;
    }
    r.bytes_sent += out.payload.bytes().size();
    r.last_progress = Clock::now();
    r.outgoing.pop_front();
  }
  return true;
}

transport::Message RingAllReduce::await_chunk(Round& r, std::uint64_t step, std::size_t offset) {
  const auto match = [&](const Message& m) {
    return m.type() == MessageType::allreduce_chunk && m.header().step == step && m.sender() == predecessor_;
  };
  for (;;) {
    std::optional<Message> m;
    try {
      const bool all_sent = flush(r);
      const auto progress_deadline = r.last_progress + options_.round_timeout;
      m = mailbox_.wait(
          match, all_sent ? progress_deadline : std::min(progress_deadline, Clock::now() + kRetryInterval));
    } catch (const PeerError& e) {
      on_peer_error(r, e);
    }
    if (m) {
      r.last_progress = Clock::now();
      return std::move(*m);
    }
    if (Clock::now() >= r.last_progress + options_.round_timeout)
      fail_stalled(r, "elements from " + std::to_string(offset) + " of ring step " +
                          std::to_string(step - r.step_base) + " from peer " + predecessor_);
  }
}

void RingAllReduce::on_peer_error(Round& r, const PeerError& error) {
  // Not a failure that waiting or probing could explain away: the run is set up wrong.
  if (error.peer_id() == successor_ && error.failure() == PeerFailure::unknown_peer)
    fail(r,
         PeerError(PeerFailure::unknown_peer, successor_, error.address(),
                   "all-reduce round " + std::to_string(r.round) + " cannot run: no connection to peer " +
                       successor_ + ", the next in the ring; connect the transport to every peer of the run"),
         ExchangeRecord::Outcome::failed);
  // A peer that said bye finished its last round first, and what it sent in that round
  // can still be on its way (behind a slow link; a bye can overtake data sent on another
  // connection): its chunks are waited for until the progress deadline, whose probe
  // then names it if they never come.
  if (error.failure() == PeerFailure::left) {
    r.said_bye.push_back(error);
    return;
  }
  probe_after(r, &error);
}

namespace {

// One probe: every other peer pinged at once, with nonces nonce_base + rank, and what that
// told about who is gone.
struct Probe {
  const PeerSet& peers;
  int n;
  std::uint64_t nonce_base;
  std::map<int, std::string> silent;        // rank -> why we think it is gone
  std::map<std::string, PeerFailure> gone;  // peers a PeerError said were gone
  std::vector<bool> awaiting;               // by rank: pinged, no answer yet
  std::size_t awaited = 0;

  Probe(const PeerSet& peers, int n, std::uint64_t nonce_base)
      : peers(peers), n(n), nonce_base(nonce_base), awaiting(static_cast<std::size_t>(n), false) {}

  void note(const PeerError& e) {
    if (means_gone(e.failure())) gone[e.peer_id()] = e.failure();
  }

  void ping(transport::Transport& transport, const std::vector<int>& order, std::uint64_t step_base) {
    for (const int rank : order) {
      const std::string& id = peers.id_of(rank);
      wire::Header ping;
      ping.type = MessageType::ping;
      ping.step = step_base;
      ping.nonce = nonce_base + static_cast<std::uint64_t>(rank);
      // A send rethrows errors stored earlier about other peers, one per call: note them
      // and send again.
      for (int attempt = 0; attempt < n + 8; ++attempt) {
        try {
          transport.send(id, ping);
          awaiting[static_cast<std::size_t>(rank)] = true;
          ++awaited;
          break;
        } catch (const PeerError& e) {
          note(e);
          if (e.peer_id() != id) continue;
          // Without a connection we cannot tell either way: leave it out.
          if (e.failure() != PeerFailure::unknown_peer) silent[rank] = reason_of(e);
          break;
        }
      }
    }
  }

  void await_pongs(Mailbox& mailbox, Clock::time_point deadline) {
    while (awaited > 0) {
      std::optional<Message> pong;
      try {
        pong = mailbox.wait(
            [&](const Message& m) {
              if (m.type() != MessageType::pong) return false;
              const std::uint64_t k = m.header().nonce - nonce_base;
              return k < static_cast<std::uint64_t>(n) && awaiting[k] &&
                     m.sender() == peers.id_of(static_cast<int>(k));
            },
            deadline);
      } catch (const PeerError& e) {
        note(e);
        const int rank = peers.rank_of(e.peer_id());
        if (rank >= 0 && awaiting[static_cast<std::size_t>(rank)] && means_gone(e.failure())) {
          awaiting[static_cast<std::size_t>(rank)] = false;
          --awaited;
          silent[rank] = reason_of(e);
        }
        continue;
      }
      if (!pong) break;
      awaiting[pong->header().nonce - nonce_base] = false;
      --awaited;
    }
  }

  // The error naming the first silent peer in order (the others in its text).
  PeerError verdict(const std::vector<int>& order, transport::Transport& transport, std::uint64_t round) {
    int culprit = -1;
    std::string others;
    for (const int rank : order) {
      if (!silent.contains(rank)) continue;
      if (culprit < 0) {
        culprit = rank;
      } else {
        others += (others.empty() ? "" : ", ") + peers.id_of(rank);
      }
    }
    const std::string& id = peers.id_of(culprit);
    const auto it = gone.find(id);
    const PeerFailure failure = it != gone.end() ? it->second : PeerFailure::no_reply;
    std::string detail = "all-reduce round " + std::to_string(round) + " cannot finish: peer " + id +
                         " is not answering (" + silent[culprit] + ")";
    if (!others.empty()) detail += "; not answering either: " + others;
    return PeerError(failure, id, transport.address_of(id), detail);
  }
};

}  // namespace

void RingAllReduce::probe_after(Round& r, const PeerError* error) {
  const auto probe_start = Clock::now();
  const auto deadline =
      probe_start + std::max<Clock::duration>(options_.round_timeout / 2, std::chrono::milliseconds(1));
  const std::uint64_t nonce_base = probe_nonce_;
  probe_nonce_ += static_cast<std::uint64_t>(n_);
  Probe probe(peers_, n_, nonce_base);
  if (error) probe.note(*error);
  for (const PeerError& bye : r.said_bye) probe.note(bye);

  // Upstream order: the predecessor first, the successor last.
  std::vector<int> order;
  for (int k = 1; k < n_; ++k) order.push_back((rank_ - k + n_) % n_);
  probe.ping(transport_, order, r.step_base);
  probe.await_pongs(mailbox_, deadline);
  for (int rank = 0; rank < n_; ++rank)
    if (probe.awaiting[static_cast<std::size_t>(rank)])
      probe.silent[rank] = "no answer to a ping within " + ms_text(Clock::now() - probe_start);

  if (probe.silent.empty()) {
    if (error && !r.warned) {
      r.warned = true;
      logging::warn("peer '" + transport_.id() + "': allreduce round " + std::to_string(r.round) + ": " +
                    error->what() + "; every peer answers pings, so the round goes on");
    }
    return;
  }
  fail(r, probe.verdict(order, transport_, r.round), ExchangeRecord::Outcome::failed);
}

void RingAllReduce::fail_stalled(Round& r, const std::string& waiting_for) {
  probe_after(r, nullptr);  // throws when some peer is gone
  const std::string detail =
      "all-reduce round " + std::to_string(r.round) + " cannot finish: no progress for " +
      ms_text(Clock::now() - r.last_progress) + " while waiting for " + waiting_for +
      ", yet every peer answers pings: a peer of the ring stopped taking part without dying (stalled, "
      "or busy outside the all-reduce)";
  fail(r, PeerError(PeerFailure::no_reply, predecessor_, transport_.address_of(predecessor_), detail),
       ExchangeRecord::Outcome::timed_out);
}

void RingAllReduce::fail(Round& r, const PeerError& error, ExchangeRecord::Outcome outcome) {
  record(r, outcome, error.what());
  throw error;
}

}  // namespace hearsay::algorithms
