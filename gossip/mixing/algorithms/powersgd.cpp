#include "gossip/mixing/algorithms/powersgd.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "base/rng.hpp"

namespace hearsay::algorithms {

namespace {

AlgorithmOptions ring_options(AlgorithmOptions options) {
  options.compressor.clear();  // the ring sums f32 values
  return options;
}

int rank_of(const AlgorithmOptions& options) {
  const auto r = compress::low_rank(options.compressor);
  if (!r)
    throw std::invalid_argument("allreduce --compress " + options.compressor +
                                ": all-reduce compresses with powersgd:R only");
  return *r;
}

}  // namespace

PowerSgdAllReduce::PowerSgdAllReduce(transport::Transport& transport, PeerSet peers, AlgorithmOptions options)
    : Algorithm(transport, peers, options),
      ring_(transport, peers, ring_options(options)),
      rank_(rank_of(options_)) {
  if (!(options_.momentum >= 0 && options_.momentum < 1))
    throw std::invalid_argument("allreduce powersgd: momentum " + std::to_string(options_.momentum) +
                                " is not in [0, 1)");
}

RoundResult PowerSgdAllReduce::mix(std::span<float> params, std::uint64_t round) {
  struct Relay {  // the ring's records reach our log however the round ends
    PowerSgdAllReduce& self;
    std::uint64_t round;
    ~Relay() {
      try {
        self.relay_records(round);
      } catch (...) {  // out of memory for a log line: the round's outcome matters more
      }
    }
  } relay{*this, round};
  if (!plan_)
    start(params, round);
  else
    compress_round(params, round);
  return RoundResult{peers_.size() - 1, 0, 0};
}

void PowerSgdAllReduce::start(std::span<float> params, std::uint64_t round) {
  auto plan = compress::plan_low_rank(params.size(), options_.tensors, rank_);
  ring_.mix(params, 2 * round);  // a plain all-reduce: x_ref agreed from here on
  reference_.assign(params.begin(), params.end());
  error_.assign(params.size(), 0.0f);
  m_.resize(params.size());
  update_.assign(params.size(), 0.0f);
  velocity_.assign(params.size(), 0.0f);
  p_.resize(plan.p_size);
  q_.resize(plan.q_size);
  // Q's start is the same on every peer: drawn from a fixed seed, not from --seed.
  Rng rng(0x706F77657273ULL);
  q_warm_.resize(plan.q_size);
  for (float& v : q_warm_) v = static_cast<float>(rng.normal());
  plan_ = std::move(plan);
}

void PowerSgdAllReduce::compress_round(std::span<float> params, std::uint64_t round) {
  if (params.size() != reference_.size())
    throw std::invalid_argument("allreduce powersgd: " + std::to_string(params.size()) + " values after " +
                                std::to_string(reference_.size()));
  const auto& plan = *plan_;
  for (std::size_t i = 0; i < params.size(); ++i) m_[i] = params[i] - reference_[i];

  for (const auto& a : plan.matrices)
    compress::multiply(&m_[a.offset], a.rows, a.cols, &q_warm_[a.q_at], rank_, &p_[a.p_at]);
  for (const auto& w : plan.whole) std::copy_n(&m_[w.offset], w.size, &p_[w.at]);
  ring_.sum(p_, 2 * round);

  for (const auto& a : plan.matrices) {
    float* const p = &p_[a.p_at];
    compress::orthonormalize(p, a.rows, rank_);
    compress::multiply_transposed(&m_[a.offset], a.rows, a.cols, p, rank_, &q_[a.q_at]);
    std::copy_n(&m_[a.offset], a.rows * a.cols, &error_[a.offset]);  // e = M - P Q_own^T
    compress::add_outer(&error_[a.offset], a.rows, a.cols, p, &q_[a.q_at], rank_, -1.0);
  }
  const auto n = static_cast<float>(peers_.size());
  std::fill(update_.begin(), update_.end(), 0.0f);
  for (const auto& w : plan.whole)
    for (std::uint64_t i = 0; i < w.size; ++i) {
      update_[w.offset + i] = p_[w.at + i] / n;
      error_[w.offset + i] = 0.0f;  // sent whole: nothing lost
    }
  ring_.sum(q_, 2 * round + 1);

  for (const auto& a : plan.matrices)
    compress::add_outer(&update_[a.offset], a.rows, a.cols, &p_[a.p_at], &q_[a.q_at], rank_,
                        1.0 / static_cast<double>(n));
  for (std::size_t i = 0; i < q_.size(); ++i) q_warm_[i] = q_[i] / n;
  apply_update();
  for (std::size_t i = 0; i < params.size(); ++i) params[i] = reference_[i] + error_[i];
}

void PowerSgdAllReduce::apply_update() {
  const auto beta = static_cast<float>(options_.momentum);  // 0: u = Δ, x_ref += Δ
  for (std::size_t i = 0; i < update_.size(); ++i) {
    velocity_[i] = beta * velocity_[i] + update_[i];
    reference_[i] += options_.nesterov ? update_[i] + beta * velocity_[i] : velocity_[i];
  }
}

void PowerSgdAllReduce::relay_records(std::uint64_t round) {
  auto records = ring_.exchanges().drain();
  if (records.empty()) return;
  ExchangeRecord merged = records.front();
  merged.round = round;
  merged.latency_s = 0;
  merged.bytes_sent = merged.bytes_received = 0;
  for (const auto& r : records) {
    merged.bytes_sent += r.bytes_sent;
    merged.bytes_received += r.bytes_received;
    merged.latency_s += r.latency_s;
    if (r.outcome != ExchangeRecord::Outcome::ok) {  // the failure is what the round says
      merged.outcome = r.outcome;
      merged.detail = r.detail;
    }
  }
  log_.record(std::move(merged));
}

}  // namespace hearsay::algorithms
