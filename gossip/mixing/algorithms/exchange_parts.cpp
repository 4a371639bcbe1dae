// The pieces of params_exchange.hpp that every graph algorithm uses on its own: ranks,
// peer health, sends and waits that outlive a broken peer, and the weighted mix.
#include <algorithm>
#include <stdexcept>

#include "gossip/mixing/algorithms/params_exchange.hpp"
#include "gossip/network/wire/payload.hpp"

namespace hearsay::algorithms {

using transport::Message;

RankIndex::RankIndex(const PeerSet& peers) {
  for (int r = 0; r < peers.size(); ++r) {
    if (!ranks_.emplace(peers.id_of(r), r).second)
      throw std::invalid_argument("peer id '" + peers.id_of(r) + "' appears twice in the run's peer list");
  }
}

int RankIndex::rank_of(const std::string& id) const {
  const auto it = ranks_.find(id);
  return it == ranks_.end() ? -1 : it->second;
}

bool PeerHealth::dead(int rank, std::uint64_t round) const {
  const auto& failure = failures_.at(static_cast<std::size_t>(rank));
  return failure && (round < failure->round || round - failure->round < kRetryRounds);
}

void PeerHealth::heard_from(int rank, std::uint64_t step) {
  auto& failure = failures_.at(static_cast<std::size_t>(rank));
  if (failure && step <= failure->round + kStaleRounds) return;
  failure.reset();
}

bool PeerHealth::on_error(int rank, const transport::PeerError& error, std::uint64_t round) {
  switch (error.failure()) {
    case transport::PeerFailure::disconnected:
    case transport::PeerFailure::left:
    case transport::PeerFailure::unreachable:
    case transport::PeerFailure::refused:
    case transport::PeerFailure::unknown_peer:
      failures_.at(static_cast<std::size_t>(rank)) = Failure{round, error.what()};
      return true;
    case transport::PeerFailure::backpressure:
    case transport::PeerFailure::no_reply:
      break;
  }
  return false;
}

std::string PeerHealth::reason(int rank) const {
  const auto& failure = failures_.at(static_cast<std::size_t>(rank));
  return failure ? "failed in round " + std::to_string(failure->round) + ": " + failure->what : std::string();
}

std::optional<std::string> send_to_rank(transport::Transport& transport, const PeerSet& peers,
                                        const RankIndex& ranks, PeerHealth& health, int rank,
                                        const wire::Header& header, const transport::Payload& payload,
                                        std::uint64_t round) {
  const std::string& id = peers.id_of(rank);
  // Each PeerError consumes one pending error, so this ends: at the latest when the send
  // itself succeeds or fails.
  for (;;) {
    try {
      transport.send(id, header, payload);
      return std::nullopt;
    } catch (const transport::PeerError& e) {
      const int named = ranks.rank_of(e.peer_id());
      if (named >= 0) health.on_error(named, e, round);
      if (named == rank) return std::string(e.what());
    }
  }
}

std::optional<Message> wait_recording_errors(Mailbox& mailbox, const Mailbox::Match& match,
                                             transport::Deadline deadline, const RankIndex& ranks,
                                             PeerHealth& health, std::uint64_t round,
                                             const std::function<void(int rank)>& on_error) {
  for (;;) {
    try {
      return mailbox.wait(match, deadline);
    } catch (const transport::PeerError& e) {
      const int rank = ranks.rank_of(e.peer_id());
      if (rank >= 0) health.on_error(rank, e, round);
      if (on_error) on_error(rank);
    }
  }
}

transport::Payload params_payload(const AlgorithmOptions& options,
                                  std::shared_ptr<const std::vector<float>> values) {
  if (options.compress == wire::Dtype::f32) {
    const std::span<const float> view(*values);
    return transport::Payload::borrow_f32(view, std::move(values));
  }
  return encode_params(options, *values);
}

void mix_weighted(std::span<float> y, std::span<const float* const> xs, std::span<const double> w) {
  if (xs.size() != w.size())
    throw std::invalid_argument("mix_weighted: " + std::to_string(xs.size()) + " buffers but " +
                                std::to_string(w.size()) + " weights");
  if (xs.empty()) {
    std::fill(y.begin(), y.end(), 0.0f);
    return;
  }
  // Blocked so each block of y is complete before it is written (y may alias an input)
  // and the accumulator stays in L1.
  constexpr std::size_t kBlock = 512;
  double acc[kBlock];
  for (std::size_t start = 0; start < y.size(); start += kBlock) {
    const std::size_t len = std::min(kBlock, y.size() - start);
    const float* x0 = xs[0] + start;
    for (std::size_t i = 0; i < len; ++i) acc[i] = w[0] * static_cast<double>(x0[i]);
    for (std::size_t k = 1; k < xs.size(); ++k) {
      const double wk = w[k];
      const float* xk = xs[k] + start;
      for (std::size_t i = 0; i < len; ++i) acc[i] += wk * static_cast<double>(xk[i]);
    }
    for (std::size_t i = 0; i < len; ++i) y[start + i] = static_cast<float>(acc[i]);
  }
}

}  // namespace hearsay::algorithms

namespace hearsay::algorithms {

MixTerms mix_terms(const ParamsExchange& exchange, const ParamsExchange::Outcome& outcome,
                   const topology::MixingRow& row, std::span<const int> in, const float* own,
                   std::uint64_t round, std::string_view algorithm, Missing missing) {
  MixTerms t;
  t.xs.push_back(own);
  t.w.push_back(outcome.mixes_own() ? row.self : 0.0);
  for (int rank : outcome.arrived) {
    if (!outcome.mixes(rank)) continue;
    const auto at = std::lower_bound(in.begin(), in.end(), rank);
    t.xs.push_back(exchange.received(rank).data());
    t.w.push_back(row.neighbours[static_cast<std::size_t>(at - in.begin())]);
  }
  double total = 0;
  for (double v : t.w) total += v;
  if (!(total > 0))
    throw std::logic_error(std::string(algorithm) + ": mixing weights of round " + std::to_string(round) +
                           " sum to " + std::to_string(total) +
                           "; the weight scheme must give self a positive weight");
  if (t.xs.size() == in.size() + 1 && outcome.mixes_own()) return t;
  if (missing == Missing::to_self && outcome.mixes_own()) {
    t.w[0] += 1 - total;
    return t;
  }
  for (double& v : t.w) v /= total;
  return t;
}

void mix_own_as_decoded(MixTerms& terms, ParamsExchange& exchange) {
  terms.xs.insert(terms.xs.begin() + 1, exchange.sent_as_received().data());
  terms.w.insert(terms.w.begin() + 1, -(1.0 - terms.w[0]));
  terms.w[0] = 1.0;
}

void LastHeard::keep(const ParamsExchange& exchange, const ParamsExchange::Outcome& outcome,
                     std::uint64_t round) {
  for (int rank : outcome.arrived) {
    if (by_rank_.size() <= static_cast<std::size_t>(rank))
      by_rank_.resize(static_cast<std::size_t>(rank) + 1);
    Heard& h = by_rank_[static_cast<std::size_t>(rank)];
    const auto values = exchange.received(rank);
    h.round = round;
    h.values.assign(values.begin(), values.end());
  }
}

void LastHeard::stand_in(MixTerms& terms, const ParamsExchange::Outcome& outcome,
                         const topology::MixingRow& row, std::span<const int> in, std::uint64_t round) const {
  if (!outcome.mixes_own()) return;
  for (std::size_t k = 0; k < in.size(); ++k) {
    const int rank = in[k];
    if (std::binary_search(outcome.arrived.begin(), outcome.arrived.end(), rank)) continue;
    if (by_rank_.size() <= static_cast<std::size_t>(rank)) continue;
    const Heard& h = by_rank_[static_cast<std::size_t>(rank)];
    if (h.values.empty() || h.round >= round || round - h.round > kRecentRounds) continue;
    terms.xs.push_back(h.values.data());
    terms.w.push_back(row.neighbours[k]);
    terms.w[0] -= row.neighbours[k];
  }
}

}  // namespace hearsay::algorithms
