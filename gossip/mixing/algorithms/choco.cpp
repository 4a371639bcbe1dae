#include "gossip/mixing/algorithms/choco.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "base/log.hpp"

namespace hearsay::algorithms {

double default_consensus_step(std::string_view compressor, bool pairwise) {
  // Gossip with sign at 0.3 ended as well as at 0.15 on healthy links, but behind a lossy
  // link and a restart its consensus distance grew 20-fold over the last epoch; at 0.15 it
  // fell throughout.
  if (pairwise && compressor == "sign") return 0.15;
  // The sparsifiers move a small part of the change a round, and a large step overshoots
  // towards copies that lag their models: LeNet on 8 peers diverged with topk:1% at 0.3 and
  // randk:1% at 0.03 (docs/PERFORMANCE.md). topk:1% at 0.1 ends as well as at 0.075, but its
  // consensus distance grows over the last epoch, and under loss and a restart it doubled
  // every 0.375 epoch; at 0.075 it falls, and grows slowly under those faults. sign and
  // int4 carry every coordinate.
  if (compressor.rfind("topk:", 0) == 0) return 0.075;
  if (compressor.rfind("randk:", 0) == 0) return 0.01;
  if (compressor == "sign") return 0.3;
  return 0.8;
}

double Choco::lookahead_for(double reach) { return reach > 1.0 ? 1.0 / reach : 1.0; }

Choco::Choco(transport::Transport& transport, PeerSet peers, AlgorithmOptions options,
             const topology::Topology& graph)
    : Algorithm(transport, std::move(peers), options),
      graph_(graph),
      exchange_(transport_, peers_, options_, log_),
      gamma_(options_.consensus_step > 0 ? options_.consensus_step
                                         : default_consensus_step(options_.compressor)),
      lookahead_(lookahead_for(topology::mixing_reach(graph_, options_.weights))),
      resync_for_(static_cast<std::size_t>(peers_.size()), 0),
      copies_(static_cast<std::size_t>(peers_.size())) {
  check_graph_matches("dpsgd", graph_, peers_.size());
  if (graph_.time_varying())
    throw std::invalid_argument(
        "dpsgd --compress " + options_.compressor + ": the graph " + graph_.describe() +
        " changes neighbours by round, and a compressed copy is kept only by the "
        "neighbours that receive every change of it; use a static graph (exp, ring, torus, "
        "complete, random-regular)");
  if (!(gamma_ > 0 && gamma_ <= 1))
    throw std::invalid_argument("--consensus-step must be in (0, 1], not " + std::to_string(gamma_));
  rows_.push_back(topology::mixing_row(graph_, options_.weights, peers_.self, 0));
  exchange_.take_with([this](const transport::Message& m, int rank) { return take(m, rank); });
  exchange_.on(wire::MessageType::copy_resync, [this](const transport::Message& m) {
    const int rank = peers_.rank_of(m.sender());
    if (rank < 0) return;  // not of this run's ranks
    resync_for_[static_cast<std::size_t>(rank)] = 1;
    ++stats_.resyncs_heard;
  });
}

std::vector<ParamsExchange::Outgoing> Choco::next_messages(std::span<const float> params, std::uint64_t round,
                                                           std::span<const int> out) {
  if (!compressor_)
    compressor_ =
        compress::make_compressor(options_.compressor, params.size(), compress::sizes_of(options_.tensors));
  const std::uint64_t version = public_version_;
  public_version_ = round + 1;
  std::vector<ParamsExchange::Outgoing> messages;
  if (version == 0) {  // the first round (also after a restart): the copy starts as the model
    public_.assign(params.begin(), params.end());
    std::fill(resync_for_.begin(), resync_for_.end(), 0);
    messages.push_back({transport::Payload::copy_f32(public_), 0});
    ++stats_.whole_sent;
    stats_.whole_messages += out.size();
    return messages;
  }
  if (rebase_ && rebase_public(round)) {
    messages.push_back({transport::Payload::copy_f32(public_), 0});
    ++stats_.whole_sent;
    stats_.whole_messages += out.size();
    return messages;
  }
  scratch_.resize(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) scratch_[i] = params[i] - public_[i];
  // A seed of its own per peer and round (rand-k's index draw).
  const std::uint64_t seed =
      (static_cast<std::uint64_t>(peers_.self) << 40) ^ (round * 0x9E3779B97F4A7C15ULL);
  std::vector<std::uint8_t> bytes = compressor_->encode(scratch_, seed);
  // The public copy takes exactly what its holders decode.
  if (const auto refused = compressor_->add_decoded(bytes, public_))
    throw std::logic_error("dpsgd --compress: our own payload does not decode: " + refused->detail);
  const ParamsExchange::Outgoing change{
      transport::Payload::encoded(wire::Dtype::compressed, params.size(), std::move(bytes)), version};
  std::size_t whole = 0;
  for (const int rank : out) whole += resync_for_[static_cast<std::size_t>(rank)] != 0;
  if (whole == 0) return {change};
  // Whole, to those that asked: the public copy as it now is, this round's change
  // included. Resending it does not reset it to the model: what the compressor left out
  // stays to be sent, and the peer's mixing goes on as if nothing was lost (resetting it
  // perturbed sign at γ 0.3 into divergence on a 5% lossy link). The others take the
  // change as usual, so a lossy link costs a whole copy to its own end only.
  const ParamsExchange::Outgoing copy{transport::Payload::copy_f32(public_), 0};
  for (const int rank : out) {
    char& asked = resync_for_[static_cast<std::size_t>(rank)];
    messages.push_back(asked != 0 ? copy : change);
    asked = 0;
  }
  ++stats_.whole_sent;
  stats_.whole_messages += whole;
  return messages;
}

ParamsExchange::Taken Choco::take(const transport::Message& message, int rank) {
  Copy& copy = copies_[static_cast<std::size_t>(rank)];
  const wire::Header& h = message.header();
  ParamsExchange::Taken taken;
  if (h.dtype == wire::Dtype::f32 && h.base == 0) {  // a whole copy: it replaces ours
    copy.values.resize(message.count());
    message.decode_into(copy.values);
    copy.version = h.step + 1;
  } else if (h.dtype != wire::Dtype::compressed) {
    taken.refused = "sent values as " + std::string(wire::to_string(h.dtype)) + ", and this peer sends " +
                    compressor_->spec() + " differences: do the peers' --compress agree?";
    return taken;
  } else if (copy.version == 0 || h.base != copy.version) {
    // A change of a copy we never held, from a sender well into its run: we (re)joined it.
    // (At a run's start a lost first copy looks the same, but every copy then is the model.)
    if (copy.version == 0 && h.base > kHeardWithin && public_version_ != 0 && !public_.empty() && !rebase_ &&
        stats_.rebases == 0) {
      rebase_ = true;
      rebase_since_ = round_ + 1;
    }
    // A change of a version we do not hold: one was lost, or we restarted. The copy stays
    // as it is (stale, and known to be) until the sender sends it whole.
    ask_resync(rank, copy);
    copy.heard = round_ + 1;
    return taken;
  } else {
    if (auto refused = compressor_->add_decoded(message.payload(), copy.values)) {
      taken.refused = refused->detail;
      return taken;
    }
    copy.version = h.step + 1;
  }
  copy.heard = round_ + 1;
  copy.asked = 0;
  taken.distance = l2_distance(copy.values, public_);
  return taken;
}

bool Choco::rebase_public(std::uint64_t round) {
  // Every other peer's copy lags its model by what its compressor has yet to send, and ours,
  // taken whole from the model, lags it by nothing: a neighbour's consensus step then pulls
  // towards ours, and ours back along that lag, every round. A sparsifier cannot send a lag
  // spread that thin, so it is never undone and grows (docs/PERFORMANCE.md, "A restarted
  // peer under topk:1%"). So a peer that (re)joined a running network takes as its copy the
  // weighted average of its in-neighbours' copies, once it holds them all, and sends it
  // whole: its copy then lags its model as theirs do, and what its model differs by is left
  // to the compressor, as for any peer.
  const auto& in = graph_.in_neighbours(peers_.self, round);
  const topology::MixingRow& row = rows_.front();
  for (const int rank : in)
    if (copies_[static_cast<std::size_t>(rank)].version == 0) {
      if (round + 1 > rebase_since_ + kHeardWithin)
        rebase_ = false;  // a neighbour that does not answer: as before
      return false;
    }
  double total = 0;
  for (std::size_t k = 0; k < in.size(); ++k) total += row.neighbours[k];
  if (!(total > 0)) return rebase_ = false;
  for (std::size_t i = 0; i < public_.size(); ++i) {
    double v = 0;
    for (std::size_t k = 0; k < in.size(); ++k)
      v += row.neighbours[k] * static_cast<double>(copies_[static_cast<std::size_t>(in[k])].values[i]);
    public_[i] = static_cast<float>(v / total);
  }
  std::fill(resync_for_.begin(), resync_for_.end(), 0);
  rebase_ = false;
  ++stats_.rebases;
  logging::info("dpsgd --compress: joined a running network; the public copy is rebased on " +
                std::to_string(in.size()) + " neighbours' copies and sent whole");
  return true;
}

void Choco::ask_resync(int rank, Copy& copy) {
  // At most every other round per neighbour: its whole copy takes a round to come.
  if (copy.asked != 0 && round_ + 1 < copy.asked + 2) return;
  copy.asked = round_ + 1;
  ++stats_.resyncs_asked;
  if (const auto why = exchange_.send_note(rank, wire::MessageType::copy_resync, round_))
    logging::debug("dpsgd --compress: could not ask '" + peers_.id_of(rank) + "' for its copy: " + *why);
}

RoundResult Choco::mix(std::span<float> params, std::uint64_t mixer_round) {
  const std::uint64_t round = exchange_.catch_up(mixer_round);
  round_ = round;
  const int self = peers_.self;
  const auto& out = graph_.out_neighbours(self, round);
  // Back to the CHOCO iterate: the local steps since the last round moved both alike.
  if (ahead_.size() == params.size())
    for (std::size_t i = 0; i < params.size(); ++i) params[i] -= ahead_[i];
  const auto outcome =
      exchange_.run(next_messages(params, round, out), params, round, out, graph_.in_neighbours(self, round));
  consensus(params, round);
  return outcome.result;
}

void Choco::consensus(std::span<float> params, std::uint64_t round) {
  const auto& in = graph_.in_neighbours(peers_.self, round);
  const topology::MixingRow& row = rows_.front();
  std::vector<const float*> copies;
  std::vector<double> w;
  for (std::size_t k = 0; k < in.size(); ++k) {
    const Copy& c = copies_[static_cast<std::size_t>(in[k])];
    if (c.version == 0 || c.heard == 0 || round + 1 > c.heard + kHeardWithin) continue;
    copies.push_back(c.values.data());
    w.push_back(row.neighbours[k]);
  }
  const double beyond = std::max(0.0, lookahead_ - gamma_);  // the look-ahead beyond x's γ d
  const bool ahead = options_.lookahead && beyond > 0 && !copies.empty();
  if (!ahead) ahead_.clear();  // the parameters are x
  if (copies.empty()) return;
  if (ahead) ahead_.resize(params.size());  // sized once: every value is written below
  double total = 0;
  for (double v : w) total += v;
  // d = Σ_j w_j x̂_j − (Σ_j w_j) x̂_i, accumulated in double; x + γ d is the next iterate.
  for (std::size_t i = 0; i < params.size(); ++i) {
    double d = -total * static_cast<double>(public_[i]);
    for (std::size_t j = 0; j < copies.size(); ++j) d += w[j] * static_cast<double>(copies[j][i]);
    const double x = static_cast<double>(params[i]) + gamma_ * d;
    if (!ahead) {
      params[i] = static_cast<float>(x);
      continue;
    }
    // The parameters become x + max(γ, κ) d, and ahead_ what of them is not x's, taken off
    // the rounded value so that the next round gets back x to a rounding.
    const float z = static_cast<float>(x + beyond * d);
    params[i] = z;
    ahead_[i] = static_cast<float>(static_cast<double>(z) - x);
  }
}

}  // namespace hearsay::algorithms
