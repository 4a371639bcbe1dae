#include "gossip/mixing/algorithms/power_gossip.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "gossip/mixing/compress/payload_bytes.hpp"

namespace hearsay::algorithms {

namespace {

std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Where a message's parts lie: the projections of the matrices from 0, the tensors sent
// whole from `whole_at`, `size` floats in all. The basis: `basis` floats.
struct Layout {
  std::uint64_t whole_at = 0, size = 0, basis = 0;
};
Layout layout(const compress::LowRankPlan& plan, std::uint64_t whole, bool on_rows) {
  const std::uint64_t ps = plan.p_size - whole;  // the Ps come first in the plan's P sum
  return on_rows ? Layout{plan.q_size, plan.q_size + whole, ps} : Layout{ps, plan.p_size, plan.q_size};
}

// Whether any of the r columns of a (rows x r) is all zero.
bool has_zero_column(const float* a, std::uint64_t rows, int r) {
  for (int c = 0; c < r; ++c) {
    bool zero = true;
    for (std::uint64_t i = 0; i < rows && zero; ++i) zero = a[i * static_cast<std::uint64_t>(r) + c] == 0.0f;
    if (zero) return true;
  }
  return false;
}

// The weight row `of` gives `to` (0 when `to` is not its neighbour).
double weight_of(const topology::Topology& graph, topology::WeightScheme scheme, int of, int to) {
  const auto& in = graph.in_neighbours(of, 0);
  const auto at = std::find(in.begin(), in.end(), to);
  if (at == in.end()) return 0;
  return topology::mixing_row(graph, scheme, of, 0).neighbours[static_cast<std::size_t>(at - in.begin())];
}

}  // namespace

std::optional<std::string> power_gossip_graph_refusal(const topology::GraphSpec& graph) {
  using topology::GraphKind;
  if (!graph.directed && graph.kind != GraphKind::exp && graph.kind != GraphKind::onepeer_exp)
    return std::nullopt;
  return "--compress powergossip:R needs an undirected graph, whose edges carry both directions every round "
         "(PowerGossip projects the difference of an edge's two ends), and --graph " +
         std::string(topology::to_string(graph.kind)) +
         " is directed: use ring, torus, complete or random-regular";
}

PowerGossip::PowerGossip(transport::Transport& transport, PeerSet peers, AlgorithmOptions options,
                         const topology::Topology& graph)
    : Algorithm(transport, std::move(peers), options),
      graph_(graph),
      exchange_(transport_, peers_, options_, log_),
      rank_(compress::power_gossip(options_.compressor).value_or(0)),
      gamma_(options_.consensus_step > 0 ? options_.consensus_step : 1.0),
      weights_(static_cast<std::size_t>(peers_.size()), 0.0),
      edges_(static_cast<std::size_t>(peers_.size())) {
  check_graph_matches("dpsgd", graph_, peers_.size());
  if (rank_ == 0)
    throw std::invalid_argument("PowerGossip: --compress " + options_.compressor + " is not powergossip:R");
  if (auto why = power_gossip_graph_refusal(graph_.spec())) throw std::invalid_argument(*why);
  if (!(gamma_ > 0 && gamma_ <= 1))
    throw std::invalid_argument("--consensus-step must be in (0, 1], not " + std::to_string(gamma_));
  const int self = peers_.self;
  for (const int j : graph_.in_neighbours(self, 0)) {
    const int lo = std::min(self, j), hi = std::max(self, j);
    // In the same order at both ends, so that both get the same bits.
    weights_[static_cast<std::size_t>(j)] =
        0.5 * (weight_of(graph_, options_.weights, lo, hi) + weight_of(graph_, options_.weights, hi, lo));
  }
  exchange_.take_with([this](const transport::Message& m, int rank) { return take(m, rank); });
}

std::uint64_t PowerGossip::floats_per_message() const noexcept {
  if (!plan_) return 0;
  return std::max(layout(*plan_, whole_, false).size, layout(*plan_, whole_, true).size);
}

void PowerGossip::draw(Edge& edge, int rank, std::uint64_t round) {
  const auto lo = static_cast<std::uint64_t>(std::min(peers_.self, rank));
  const auto hi = static_cast<std::uint64_t>(std::max(peers_.self, rank));
  const std::uint64_t seed = splitmix((lo << 32) ^ hi) ^ splitmix(round + 0x5DEECE66DULL);
  edge.on_rows = false;
  edge.basis.resize(plan_->q_size);
  for (std::uint64_t i = 0; i < edge.basis.size(); ++i)  // uniform in [-1, 1), from the top 24 bits
    edge.basis[i] = static_cast<float>(static_cast<double>(splitmix(seed + i) >> 40) / 8388608.0 - 1.0);
  for (const auto& m : plan_->matrices) compress::orthonormalize(edge.basis.data() + m.q_at, m.cols, rank_);
  edge.id = 2 * round + 1;
  ++stats_.drawn;
}

void PowerGossip::project(Edge& edge, std::span<const float> params) const {
  const Layout at = layout(*plan_, whole_, edge.on_rows);
  edge.sent.resize(at.size);
  for (const auto& m : plan_->matrices) {
    const float* x = params.data() + m.offset;
    if (edge.on_rows)
      compress::multiply_transposed(x, m.rows, m.cols, edge.basis.data() + m.p_at, rank_,
                                    edge.sent.data() + m.q_at);
    else
      compress::multiply(x, m.rows, m.cols, edge.basis.data() + m.q_at, rank_, edge.sent.data() + m.p_at);
  }
  const std::uint64_t ps = plan_->p_size - whole_;
  for (const auto& w : plan_->whole)
    std::copy_n(params.begin() + static_cast<std::ptrdiff_t>(w.offset), w.size,
                edge.sent.begin() + static_cast<std::ptrdiff_t>(at.whole_at + (w.at - ps)));
}

ParamsExchange::Taken PowerGossip::take(const transport::Message& message, int rank) {
  Edge& edge = edges_[static_cast<std::size_t>(rank)];
  const std::string spec = options_.compressor;
  ParamsExchange::Taken taken;
  if (message.header().dtype != wire::Dtype::compressed) {
    taken.refused = "sent values as " + std::string(wire::to_string(message.header().dtype)) +
                    ", and this peer sends " + spec + " projections: do the peers' --compress agree?";
    return taken;
  }
  compress::PayloadReader in(message.payload());
  std::uint8_t id = 0, on_rows = 0;
  std::uint16_t r = 0;
  std::uint32_t n = 0;
  if (!in.take(id) || !in.take(on_rows) || !in.take(r) || !in.take(n) ||
      id != static_cast<std::uint8_t>(compress::CompressorId::powergossip) || on_rows > 1 || r != rank_) {
    taken.refused = "sent a compressed payload that is not " + spec + ": do the peers' --compress agree?";
    return taken;
  }
  const Layout at = layout(*plan_, whole_, on_rows != 0);
  std::span<const std::uint8_t> values;
  if (n != message.count() || in.left() != at.size * 4 || !in.skip(at.size, 4, values)) {
    taken.refused = spec + ": a projection of " + std::to_string(in.left() / 4) +
                    " values, where this model's has " + std::to_string(at.size) +
                    ": do both run the same model?";
    return taken;
  }
  edge.heard.resize(at.size);
  for (std::uint64_t i = 0; i < at.size; ++i) {
    edge.heard[i] = compress::value_at<float>(values, i);
    if (!std::isfinite(edge.heard[i])) {
      taken.refused = spec + ": value " + std::to_string(i) + " of the projection is not finite";
      return taken;
    }
  }
  edge.heard_id = message.header().base;
  edge.arrived = edge.heard_id == edge.id && (on_rows != 0) == edge.on_rows;
  if (!edge.arrived) ++stats_.mismatched;
  return taken;
}

void PowerGossip::move(Edge& edge, int rank, std::span<float> params, std::uint64_t round) {
  const bool lo = peers_.self < rank;
  // M = X_lo − X_hi on the basis, the same bits at both ends.
  diff_.resize(edge.sent.size());
  for (std::size_t i = 0; i < diff_.size(); ++i)
    diff_[i] = lo ? edge.sent[i] - edge.heard[i] : edge.heard[i] - edge.sent[i];
  const double scale = (lo ? -1.0 : 1.0) * gamma_ * weights_[static_cast<std::size_t>(rank)];
  const Layout at = layout(*plan_, whole_, edge.on_rows);
  for (const auto& m : plan_->matrices) {
    float* x = params.data() + m.offset;
    if (edge.on_rows)  // M ~ p (p^T M) = p (M^T p)^T
      compress::add_outer(x, m.rows, m.cols, edge.basis.data() + m.p_at, diff_.data() + m.q_at, rank_, scale);
    else  // M ~ (M q) q^T
      compress::add_outer(x, m.rows, m.cols, diff_.data() + m.p_at, edge.basis.data() + m.q_at, rank_, scale);
  }
  const std::uint64_t ps = plan_->p_size - whole_;
  for (const auto& w : plan_->whole)
    for (std::uint64_t k = 0; k < w.size; ++k) {
      float& x = params[w.offset + k];
      x = static_cast<float>(static_cast<double>(x) + scale * diff_[at.whole_at + (w.at - ps) + k]);
    }
  // The next basis: what came out, orthonormalised (the other side of each matrix).
  edge.on_rows = !edge.on_rows;
  const Layout next = layout(*plan_, whole_, edge.on_rows);
  edge.basis.assign(diff_.begin(), diff_.begin() + static_cast<std::ptrdiff_t>(next.basis));
  bool zero = false;
  for (const auto& m : plan_->matrices) {
    float* b = edge.basis.data() + (edge.on_rows ? m.p_at : m.q_at);
    const std::uint64_t length = edge.on_rows ? m.rows : m.cols;
    compress::orthonormalize(b, length, rank_);
    zero = zero || has_zero_column(b, length, rank_);
  }
  edge.id = zero ? 0 : 2 * (round + 1);
  ++stats_.moved;
}

RoundResult PowerGossip::mix(std::span<float> params, std::uint64_t mixer_round) {
  const std::uint64_t round = exchange_.catch_up(mixer_round);
  if (!plan_) {
    plan_ = compress::plan_low_rank(params.size(), options_.tensors, rank_);
    whole_ = 0;
    for (const auto& w : plan_->whole) whole_ += w.size;
  }
  const int self = peers_.self;
  const auto& neighbours = graph_.out_neighbours(self, round);
  std::vector<ParamsExchange::Outgoing> outgoing;
  for (const int rank : neighbours) {
    Edge& edge = edges_[static_cast<std::size_t>(rank)];
    if (edge.id == 0) draw(edge, rank, round);
    edge.arrived = false;
    project(edge, params);
    compress::PayloadWriter out(8 + edge.sent.size() * 4);
    out.put(static_cast<std::uint8_t>(compress::CompressorId::powergossip));
    out.put(static_cast<std::uint8_t>(edge.on_rows ? 1 : 0));
    out.put(static_cast<std::uint16_t>(rank_));
    out.put(static_cast<std::uint32_t>(params.size()));
    out.put_all(std::span<const float>(edge.sent));
    outgoing.push_back(
        {transport::Payload::encoded(wire::Dtype::compressed, params.size(), std::move(out).take()),
         edge.id});
  }
  // Every message was projected from the model before the round: the moves of the edges
  // add up as D-PSGD's terms do.
  const auto outcome =
      exchange_.run(std::move(outgoing), params, round, neighbours, graph_.in_neighbours(self, round));
  for (const int rank : neighbours) {
    Edge& edge = edges_[static_cast<std::size_t>(rank)];
    if (edge.arrived) {
      move(edge, rank, params, round);
    } else if (edge.heard_id != 0 && edge.heard_id != edge.id) {
      edge.id = 0;  // it holds another basis: both draw one the next round
    }
    edge.heard_id = 0;
  }
  return outcome.result;
}

}  // namespace hearsay::algorithms
