// Compressors of differences: CHOCO-SGD's Q (Koloskova, Stich, Jaggi 2019). A peer sends
// Q(x - x_hat), the change of its public copy x_hat, and every holder of that copy adds the
// decoded change to it; the copies stay equal only if every holder decodes exactly what
// the sender added to its own. So each compressor is one class with one decoder, used by
// the sender on its own payload as by the receivers: the same bytes, the same float
// operations, the same result to the bit.
//
// A payload is self-describing (docs/PROTOCOL.md, "Compressed differences"): it starts
// with the compressor's id byte and the dense length, and carries what its decoder needs
// (top-k's indices, rand-k's seed, sign's and the quantizers' scales). It travels as
// wire::Dtype::compressed; the transport checks only its checksum, and the decoder checks
// everything else before it touches a value: a payload that fails (another compressor, a
// length that is not the model's, an index out of range or out of order, a scale that is
// not finite) changes nothing and says why.
//
// Blocks: sign and the quantizers scale per block, the model's tensors when the algorithm
// knows them (AlgorithmOptions::tensor_sizes), cut at kMaxBlock elements, so a layer with
// small weights keeps its own scale; without tensor sizes, blocks of kMaxBlock.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gossip/network/wire/header.hpp"

namespace hearsay::compress {

inline constexpr std::uint64_t kMaxBlock = 4096;
inline constexpr int kMaxRank = 32;  // powersgd:R, powergossip:R

// A model tensor seen as a matrix: its first dimension by the product of the others, as
// PowerSGD reshapes it (a vector: n x 1).
struct TensorShape {
  std::uint64_t rows = 0, cols = 1;
  std::uint64_t size() const noexcept { return rows * cols; }
  bool operator==(const TensorShape&) const = default;
};
std::vector<std::uint64_t> sizes_of(std::span<const TensorShape> tensors);

// The block lengths of n values split at the tensors `tensor_sizes` (summing to n; empty:
// one tensor) and then into pieces of at most kMaxBlock. std::invalid_argument when the
// sizes do not sum to n.
std::vector<std::uint32_t> block_lengths(std::uint64_t n, std::span<const std::uint64_t> tensor_sizes);

// Why a payload was refused, for the receiver's log and its drop counters.
struct Refusal {
  wire::DropReason reason = wire::DropReason::bad_dtype;
  std::string detail;
};

class Compressor {
 public:
  virtual ~Compressor() = default;
  Compressor(const Compressor&) = delete;
  Compressor& operator=(const Compressor&) = delete;

  // As --compress spells it ("topk:1%", "sign", ...).
  virtual std::string spec() const = 0;
  // The payload of Q(v), of exactly n = v.size() values (the size given at construction).
  // `seed`: randk's index draw (the sender's round mixed with its id, so that neither side
  // sends it twice); the others ignore it. Deterministic in (v, seed).
  virtual std::vector<std::uint8_t> encode(std::span<const float> v, std::uint64_t seed) const = 0;
  // Adds the decoded payload to `into` (n values), after checking all of it: on a refusal
  // `into` is unchanged.
  virtual std::optional<Refusal> add_decoded(std::span<const std::uint8_t> payload,
                                             std::span<float> into) const = 0;
  // The bytes encode() writes for n values (the most, for those whose size varies).
  virtual std::uint64_t payload_bytes() const = 0;
  // Values this compressor keeps of each one sent uncompressed: its share of f32's bits,
  // for the reports and the consensus step's default (0 < share <= 1).
  double share() const { return static_cast<double>(payload_bytes()) / (4.0 * static_cast<double>(size_)); }
  std::uint64_t size() const noexcept { return size_; }

 protected:
  explicit Compressor(std::uint64_t n) : size_(n) {}
  const std::uint64_t size_;
};

// Whether --compress names a compressor of differences (topk:P%, randk:P%, sign, int4),
// as opposed to a value dtype (f32, f16, bf16, int8) that every algorithm can send, or
// a low-rank projection (powersgd:R, powergossip:R).
bool is_difference_compressor(std::string_view spec);
// Whether a spec's consensus step moves a model by a coarse estimate of its neighbours'
// differences, leaving most of each round's change behind: CHOCO's copies under topk:P%,
// randk:P% or sign, and powergossip:R's rank-R projections. Only a small step can follow
// such an estimate. int4 carries every coordinate to 1/16 of its change, and its copies
// keep up; powersgd:R is all-reduce's, with no consensus step.
bool coarse_consensus(std::string_view spec);
// R of "powersgd:R" (all-reduce's rank-R updates, PowerSGD; low_rank.hpp); nullopt for
// any other spec.
std::optional<int> low_rank(std::string_view spec);
// R of "powergossip:R" (D-PSGD's rank-R projections of each neighbour difference,
// PowerGossip; algorithms/power_gossip.hpp); nullopt for any other spec.
std::optional<int> power_gossip(std::string_view spec);
// The compressor of `spec` for n values split at tensor_sizes (see block_lengths).
// std::invalid_argument saying what is accepted for a spec that names none, or a
// percentage outside (0, 100], or for powersgd:R and powergossip:R (no compressor of
// differences).
std::unique_ptr<Compressor> make_compressor(std::string_view spec, std::uint64_t n,
                                            std::span<const std::uint64_t> tensor_sizes = {});
// Checks a spec (a compressor of differences, powersgd:R or powergossip:R) without building anything:
// the message saying what is wrong and what is accepted, or nullopt when the spec is good.
std::optional<std::string> check_compressor_spec(std::string_view spec);

}  // namespace hearsay::compress
