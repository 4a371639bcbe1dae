// PowerSGD's arithmetic (Vogels, Karimireddy, Jaggi, NeurIPS 2019), for all-reduce's
// --compress powersgd:R (algorithms/powersgd.hpp): each tensor of the flat buffer is a
// matrix M (its first dimension by the product of the others, as torch's powerSGD_hook
// reshapes it), approximated at rank r by one power-iteration step warm-started from the
// previous round's Q: P = M Q, P orthonormalised, Q = M^T P, M ~ P Q^T. P and Q are what
// travel: r (rows + cols) values instead of rows x cols.
//
// The functions are plain loops over row-major float arrays with double accumulators, in
// a fixed order: every peer runs the same code on the same all-reduced P and Q, and so
// gets the same bits (all-reduce promises identical results on every peer).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "gossip/mixing/compress/compressor.hpp"

namespace hearsay::compress {

// Where each tensor of a flat buffer goes in a PowerSGD round.
struct LowRankPlan {
  // Compressed: P (rows x r) at p_at of the P sum, Q (cols x r) at q_at of the Q sum.
  struct Matrix {
    std::uint64_t offset = 0, rows = 0, cols = 0, p_at = 0, q_at = 0;
  };
  // Sent whole with the Ps (vectors, and matrices that rank r would not make smaller).
  struct Whole {
    std::uint64_t offset = 0, size = 0, at = 0;
  };
  int rank = 0;
  std::vector<Matrix> matrices;
  std::vector<Whole> whole;
  std::uint64_t p_size = 0;  // floats of the first sum: the Ps, then the whole tensors
  std::uint64_t q_size = 0;  // floats of the second: the Qs
};

// The plan for n values split at `tensors` (their sizes must sum to n: std::invalid_argument
// otherwise). A matrix is compressed when r < min(rows, cols) and r (rows + cols) < rows x
// cols. Without tensors the buffer is cut into pieces of kMaxBlock values, a full piece
// taken as a 64 x 64 matrix and a shorter last one sent whole: the peers still agree, but
// the approximation no longer follows the layers (a caller that knows them passes them).
LowRankPlan plan_low_rank(std::uint64_t n, std::span<const TensorShape> tensors, int rank);

// p (rows x r) = m (rows x cols) q (cols x r).
void multiply(const float* m, std::uint64_t rows, std::uint64_t cols, const float* q, int r, float* p);
// q (cols x r) = m^T (cols x rows) p (rows x r).
void multiply_transposed(const float* m, std::uint64_t rows, std::uint64_t cols, const float* p, int r,
                         float* q);
// Orthonormalises the r columns of p (rows x r) in place, by modified Gram-Schmidt in
// order; a column with nothing left (norm 0, or not finite) becomes 0.
void orthonormalize(float* p, std::uint64_t rows, int r);
// m (rows x cols) += scale p (rows x r) q^T (r x cols).
void add_outer(float* m, std::uint64_t rows, std::uint64_t cols, const float* p, const float* q, int r,
               double scale);

}  // namespace hearsay::compress
