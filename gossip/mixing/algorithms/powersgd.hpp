// All-reduce with PowerSGD (Vogels, Karimireddy, Jaggi, NeurIPS 2019; torch's
// powerSGD_hook): --algo allreduce --compress powersgd:R. The centralized baseline with
// low-rank compression, so that compressed gossip is compared with compressed all-reduce.
//
// hearsay's all-reduce averages parameters after each peer's local step, so what is
// compressed is each peer's update since the last agreed model x_ref (share-weighted, as
// RingAllReduce::mix weighs it) plus its error-feedback memory e:
//
//   M = share (x - x_ref) + e                     per tensor, as a rows x cols matrix
//   P = M Q;  P_sum = all-reduce(P);  orthonormalise P_sum      (Q: last round's, warm start)
//   Q_own = M^T P_sum;  e = M - P_sum Q_own^T     (what this peer's M lost: kept for later)
//   Q_sum = all-reduce(Q_own);  x_ref += P_sum Q_sum^T / n;  x = x_ref
//
// Vectors and matrices that rank R would not make smaller travel whole in the first sum
// (exact, no error). The two sums are RingAllReduce::sum calls of rounds 2k and 2k + 1,
// on the wire as any all-reduce round (docs/PROTOCOL.md). Every peer ends each round with
// the same x_ref to the bit: the sums are identical everywhere and the arithmetic
// (compress/low_rank.hpp) runs in a fixed order. The first round is a plain all-reduce of
// the parameters, which makes x_ref agreed however the peers started.
//
// The momentum stays each peer's own and is applied before compression (torch's hook
// compresses gradients and the optimizer's momentum follows): the error feedback carries
// what the compression leaves out to the next rounds either way. Failure is
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
  // pieces, compress::plan_low_rank). std::invalid_argument as RingAllReduce's, or for
  // another compressor.
  PowerSgdAllReduce(transport::Transport& transport, PeerSet peers, AlgorithmOptions options);

  std::string_view name() const override { return "allreduce"; }
  RoundResult mix(std::span<float> params, std::uint64_t round) override;

  int rank() const noexcept { return rank_; }
  // The error-feedback memory (empty before the first compressed round).
  std::span<const float> error() const noexcept { return error_; }
  // The floats the two sums of a compressed round carry (0 before the first round).
  std::uint64_t floats_per_round() const noexcept { return plan_ ? plan_->p_size + plan_->q_size : 0; }

 private:
  void start(std::span<float> params, std::uint64_t round);
  void compress_round(std::span<float> params, std::uint64_t round);
  // Moves the ring's records of `round` into our log as one record.
  void relay_records(std::uint64_t round);

  RingAllReduce ring_;
  int rank_;
  std::optional<compress::LowRankPlan> plan_;
  std::vector<float> reference_;  // x_ref: the agreed model
  std::vector<float> error_;      // e
  std::vector<float> m_;          // this round's M
  std::vector<float> p_, q_;      // the sums' buffers
  std::vector<float> q_warm_;     // last round's Q (averaged), the next one's start
};

}  // namespace hearsay::algorithms
