#include "gossip/mixing/algorithms/algorithm.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "gossip/network/wire/payload.hpp"

namespace hearsay::algorithms {

Algorithm::Algorithm(transport::Transport& transport, PeerSet peers, AlgorithmOptions options)
    : transport_(transport), peers_(std::move(peers)), options_(std::move(options)) {
  if (peers_.self < 0 || peers_.self >= peers_.size())
    throw std::invalid_argument(
        "our rank " + std::to_string(peers_.self) +
        (peers_.size() > 0 ? " is outside 0.." + std::to_string(peers_.size() - 1) : " is in an empty peer set"));
}

void check_graph_matches(std::string_view algorithm, const topology::Topology& graph, int peers) {
  if (graph.peers() != peers)
    throw std::invalid_argument(std::string(algorithm) + ": the graph (" + graph.describe() + ") has " +
                                std::to_string(graph.peers()) + " ranks but the run has " +
                                std::to_string(peers) +
                                " peers; build the topology for every peer (--world must match its --peers)");
}

int PeerSet::rank_of(std::string_view id) const {
  for (std::size_t r = 0; r < ids.size(); ++r)
    if (ids[r] == id) return static_cast<int>(r);
  return -1;
}

std::string_view to_string(ExchangeRecord::Outcome outcome) {
  switch (outcome) {
    case ExchangeRecord::Outcome::ok:
      return "ok";
    case ExchangeRecord::Outcome::timed_out:
      return "timed_out";
    case ExchangeRecord::Outcome::failed:
      return "failed";
    case ExchangeRecord::Outcome::implausible:
      return "implausible";
    case ExchangeRecord::Outcome::busy:
      return "busy";
  }
  return "?";
}

void ExchangeLog::record(ExchangeRecord r) {
  std::lock_guard lock(mutex_);
  switch (r.outcome) {
    case ExchangeRecord::Outcome::ok:
      ++totals_.ok;
      break;
    case ExchangeRecord::Outcome::timed_out:
      ++totals_.timed_out;
      break;
    case ExchangeRecord::Outcome::failed:
      ++totals_.failed;
      break;
    case ExchangeRecord::Outcome::implausible:
      ++totals_.implausible;
      break;
    case ExchangeRecord::Outcome::busy:
      ++totals_.busy;
      break;
  }
  totals_.bytes_sent += r.bytes_sent;
  totals_.bytes_received += r.bytes_received;
  // A reader that never drains must not grow memory without bound: keep the newest.
  if (records_.size() >= kMaxKept) records_.erase(records_.begin(), records_.begin() + kMaxKept / 2);
  records_.push_back(std::move(r));
}

void ExchangeLog::count_refusal() {
  std::lock_guard lock(mutex_);
  ++totals_.failed;
}

std::vector<ExchangeRecord> ExchangeLog::drain() {
  std::lock_guard lock(mutex_);
  std::vector<ExchangeRecord> out;
  out.swap(records_);
  return out;
}

ExchangeLog::Totals ExchangeLog::totals() const {
  std::lock_guard lock(mutex_);
  return totals_;
}

bool plausible_partner(std::span<const float> ours, const float* theirs) noexcept {
  double ours2 = 0, theirs2 = 0;
  const float* x = ours.data();
  const std::size_t n = ours.size();
#pragma omp simd reduction(+ : ours2, theirs2)
  for (std::size_t i = 0; i < n; ++i) {
    ours2 += static_cast<double>(x[i]) * x[i];
    theirs2 += static_cast<double>(theirs[i]) * theirs[i];
  }
  const double limit = kImplausibleNorm * std::sqrt(std::max(ours2, static_cast<double>(n)));
  return std::sqrt(theirs2) <= limit;  // false for inf and nan too
}

void Algorithm::serve(std::span<float>, Clock::time_point) {}

void Algorithm::set_peers(PeerSet peers) {
  if (peers.ids == peers_.ids && peers.self == peers_.self) return;
  throw std::invalid_argument("algorithm '" + std::string(name()) +
                              "' mixes over the fixed ranks of --world (" + std::to_string(peers_.size()) +
                              " peers): its peer set does not change with membership");
}

double l2_distance(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) throw std::invalid_argument("l2_distance: buffers of different sizes");
  double sum = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    sum += d * d;
  }
  return std::sqrt(sum);
}

transport::Payload encode_params(const AlgorithmOptions& options, std::span<const float> values,
                                 std::size_t offset, std::size_t total) {
  if (options.compress != wire::Dtype::int8) return transport::Payload::encode(options.compress, values);
  if (total == 0) total = values.size();
  const std::vector<std::uint64_t> sizes = compress::sizes_of(options.tensors);
  std::uint64_t sum = 0;
  for (const auto s : sizes) sum += s;
  if (sizes.empty() || sum != total) return transport::Payload::encode(options.compress, values);
  const auto blocks =
      wire::int8_blocks(values.size(), wire::tensor_sizes_within(sizes, offset, values.size()));
  return transport::Payload::encode(options.compress, values, blocks);
}

}  // namespace hearsay::algorithms
