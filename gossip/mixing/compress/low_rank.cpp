#include "gossip/mixing/compress/low_rank.hpp"

#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

namespace hearsay::compress {

namespace {

// The shapes PowerSGD sees without the model's: 64 x 64 pieces, a shorter last piece whole.
std::vector<TensorShape> pieces(std::uint64_t n) {
  std::vector<TensorShape> out;
  for (std::uint64_t at = 0; at < n; at += kMaxBlock) {
    const std::uint64_t length = std::min(kMaxBlock, n - at);
    out.push_back(length == kMaxBlock ? TensorShape{64, 64} : TensorShape{length, 1});
  }
  return out;
}

}  // namespace

LowRankPlan plan_low_rank(std::uint64_t n, std::span<const TensorShape> tensors, int rank) {
  if (rank < 1 || rank > kMaxRank)
    throw std::invalid_argument("powersgd: rank " + std::to_string(rank) + " is outside 1.." +
                                std::to_string(kMaxRank));
  std::vector<TensorShape> own;
  if (tensors.empty()) {
    own = pieces(n);
    tensors = own;
  }
  const auto sizes = sizes_of(tensors);
  const std::uint64_t sum = std::accumulate(sizes.begin(), sizes.end(), std::uint64_t{0});
  if (sum != n)
    throw std::invalid_argument("powersgd: the tensors' sizes sum to " + std::to_string(sum) + ", not " +
                                std::to_string(n) + " values");
  LowRankPlan plan;
  plan.rank = rank;
  const auto r = static_cast<std::uint64_t>(rank);
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    const bool smaller = r < std::min(t.rows, t.cols) && r * (t.rows + t.cols) < t.size();
    if (smaller) {
      plan.matrices.push_back({offset, t.rows, t.cols, plan.p_size, plan.q_size});
      plan.p_size += t.rows * r;
      plan.q_size += t.cols * r;
    }
    offset += t.size();
  }
  offset = 0;
  for (const auto& t : tensors) {  // after the Ps, so that each P starts where the plan says
    const bool smaller = r < std::min(t.rows, t.cols) && r * (t.rows + t.cols) < t.size();
    if (!smaller && t.size() > 0) {
      plan.whole.push_back({offset, t.size(), plan.p_size});
      plan.p_size += t.size();
    }
    offset += t.size();
  }
  return plan;
}

void multiply(const float* m, std::uint64_t rows, std::uint64_t cols, const float* q, int r, float* p) {
  const auto ur = static_cast<std::uint64_t>(r);
  for (std::uint64_t i = 0; i < rows; ++i)
    for (std::uint64_t k = 0; k < ur; ++k) {
      double s = 0;
      for (std::uint64_t j = 0; j < cols; ++j) s += static_cast<double>(m[i * cols + j]) * q[j * ur + k];
      p[i * ur + k] = static_cast<float>(s);
    }
}

void multiply_transposed(const float* m, std::uint64_t rows, std::uint64_t cols, const float* p, int r,
                         float* q) {
  const auto ur = static_cast<std::uint64_t>(r);
  std::vector<double> s(cols * ur, 0.0);
  for (std::uint64_t i = 0; i < rows; ++i)  // row by row: m is read in memory order
    for (std::uint64_t j = 0; j < cols; ++j) {
      const double mij = m[i * cols + j];
      for (std::uint64_t k = 0; k < ur; ++k) s[j * ur + k] += mij * p[i * ur + k];
    }
  for (std::uint64_t x = 0; x < cols * ur; ++x) q[x] = static_cast<float>(s[x]);
}

void orthonormalize(float* p, std::uint64_t rows, int r) {
  const auto ur = static_cast<std::uint64_t>(r);
  for (std::uint64_t k = 0; k < ur; ++k) {
    for (std::uint64_t before = 0; before < k; ++before) {
      double dot = 0;
      for (std::uint64_t i = 0; i < rows; ++i) dot += static_cast<double>(p[i * ur + k]) * p[i * ur + before];
      for (std::uint64_t i = 0; i < rows; ++i)
        p[i * ur + k] = static_cast<float>(p[i * ur + k] - dot * p[i * ur + before]);
    }
    double norm = 0;
    for (std::uint64_t i = 0; i < rows; ++i) norm += static_cast<double>(p[i * ur + k]) * p[i * ur + k];
    norm = std::sqrt(norm);
    const bool usable = std::isfinite(norm) && norm > 0;
    for (std::uint64_t i = 0; i < rows; ++i)
      p[i * ur + k] = usable ? static_cast<float>(p[i * ur + k] / norm) : 0.0f;
  }
}

void add_outer(float* m, std::uint64_t rows, std::uint64_t cols, const float* p, const float* q, int r,
               double scale) {
  const auto ur = static_cast<std::uint64_t>(r);
  for (std::uint64_t i = 0; i < rows; ++i)
    for (std::uint64_t j = 0; j < cols; ++j) {
      double s = 0;
      for (std::uint64_t k = 0; k < ur; ++k) s += static_cast<double>(p[i * ur + k]) * q[j * ur + k];
      m[i * cols + j] = static_cast<float>(m[i * cols + j] + scale * s);
    }
}

}  // namespace hearsay::compress
