// All-reduce with PowerSGD (Vogels, Karimireddy, Jaggi, NeurIPS 2019; torch's
// powerSGD_hook): --algo allreduce --compress powersgd:R. The centralized baseline with
// low-rank compression, so that compressed gossip is compared with compressed all-reduce.
//
// hearsay's all-reduce averages parameters after each peer's local step, so what is
// compressed is each peer's change since the last agreed model x_ref (with unequal shards
// the Mixer has scaled its steps by its share, mixer.hpp):
//
//   M = x - x_ref                                 per tensor, as a rows x cols matrix
//   P = M Q;  P_sum = all-reduce(P);  orthonormalise P_sum      (Q: last round's, warm start)
//   Q_own = M^T P_sum;  e = M - P_sum Q_own^T     (what this peer's M lost)
//   Q_sum = all-reduce(Q_own);  x_ref += P_sum Q_sum^T / n;  x = x_ref + e
//
// The error feedback lives in the model: a peer keeps what its own change lost, so the
// next round's M carries it again, and its next steps start from where its own steps
// took it. The mean of the peers' models is then exactly the mean of every step taken
// (n x_ref + sum e = the sum of all changes), and the peers differ only by what is still
// to be sent. The usual place, a memory added to M while x = x_ref, measured 1.2 to 1.6
// points worse on LeNet: the optimizer's momentum, each peer's own, kept pushing along
// what had not been applied yet (at momentum 0 both placements are within 0.2 point of
// all-reduce; docs/PERFORMANCE.md).
//
// The momentum runs over the agreed update, as the optimizer after torch's hook runs it
// over the averaged, decompressed gradient: a native peer's optimizer runs without
// momentum here (options.momentum; peer_config.hpp, algorithm_applies_momentum), and each round
//
//   Δ = P_sum Q_sum^T / n;  u = β u + Δ;  x_ref += u      (Nesterov: x_ref += Δ + β u)
//
// u is the same on every peer, as Δ is. Left in each peer's optimizer, the momentum ran
// over the peer's own gradients and kept pushing along what rank R had not sent yet
// (docs/PERFORMANCE.md has what that cost). u holds updates (the learning rate in them), not gradients: while
// the learning rate changes it weighs each earlier step at that step's rate, where torch's
// buffer is scaled by today's. A caller whose optimizer keeps its momentum (a PyTorch
// peer's) leaves options.momentum at 0.
//
// Vectors and matrices that rank R would not make smaller travel whole in the first sum
// (exact, no error). The two sums are RingAllReduce::sum calls of rounds 2k and 2k + 1,
// on the wire as any all-reduce round (docs/PROTOCOL.md). Every peer ends each round with
// the same x_ref to the bit: the sums are identical everywhere and the arithmetic
// (compress/low_rank.hpp) runs in a fixed order. The first round is a plain all-reduce of
// the parameters, which makes x_ref agreed however the peers started. Failure is
// RingAllReduce's: a lost peer ends the round with a PeerError naming it.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "gossip/mixing/algorithms/algorithm.hpp"
#include "gossip/mixing/algorithms/allreduce.hpp"
#include "gossip/mixing/compress/low_rank.hpp"

namespace hearsay::algorithms {

class PowerSgdAllReduce final : public Algorithm {
 public:
  // options.compressor is "powersgd:R"; options.tensors the model's tensors (empty: 64 x 64
  // pieces, compress::plan_low_rank). std::invalid_argument as RingAllReduce's, for
  // another compressor, or for a momentum outside [0, 1).
  PowerSgdAllReduce(transport::Transport& transport, PeerSet peers, AlgorithmOptions options);

  std::string_view name() const override { return "allreduce"; }
  RoundResult mix(std::span<float> params, std::uint64_t round) override;

  int rank() const noexcept { return rank_; }
  // The error feedback e (empty before the first round), the agreed model
  // x_ref and the momentum u (zeros without options.momentum), the same on every peer.
  std::span<const float> error() const noexcept { return error_; }
  std::span<const float> reference() const noexcept { return reference_; }
  std::span<const float> velocity() const noexcept { return velocity_; }
  // The floats the two sums of a compressed round carry (0 before the first round).
  std::uint64_t floats_per_round() const noexcept { return plan_ ? plan_->p_size + plan_->q_size : 0; }

 private:
  void start(std::span<float> params, std::uint64_t round);
  void compress_round(std::span<float> params, std::uint64_t round);
  // x_ref += this round's update Δ, through the momentum when options.momentum is set.
  void apply_update();
  // Moves the ring's records of `round` into our log as one record.
  void relay_records(std::uint64_t round);

  RingAllReduce ring_;
  int rank_;
  std::optional<compress::LowRankPlan> plan_;
  std::vector<float> reference_;  // x_ref: the agreed model
  std::vector<float> error_;      // e: in the model too (x = x_ref + e)
  std::vector<float> m_;          // this round's M
  std::vector<float> p_, q_;      // the sums' buffers
  std::vector<float> q_warm_;     // last round's Q (averaged), the next one's start
  std::vector<float> update_;     // Δ: this round's agreed update
  std::vector<float> velocity_;   // u: the momentum over the agreed updates
};

}  // namespace hearsay::algorithms
