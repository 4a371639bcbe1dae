// Mixing weights of a graph: the row-stochastic W that D-PSGD-style averaging applies,
// the column-stochastic P of push-sum, and the dense-matrix checks and products used to
// verify them and to analyse time-varying graphs.
#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

#include "gossip/mixing/topology/topology.hpp"

namespace hearsay::topology {

std::string_view to_string(WeightScheme scheme) {
  switch (scheme) {
    case WeightScheme::uniform:
      return "uniform";
    case WeightScheme::metropolis:
      return "metropolis";
  }
  return "?";
}

WeightScheme parse_weight_scheme(std::string_view name) {
  if (name == "uniform") return WeightScheme::uniform;
  if (name == "metropolis") return WeightScheme::metropolis;
  throw TopologyError("unknown mixing weights '" + std::string(name) + "' (known: uniform, metropolis)");
}

MixingRow mixing_row(const Topology& g, WeightScheme scheme, int rank, std::uint64_t round) {
  const std::vector<int>& in = g.in_neighbours(rank, round);
  MixingRow row;
  row.neighbours.resize(in.size());
  if (scheme == WeightScheme::uniform) {
    // Every weight computed the same way, so all equal exactly (1/2 and 1/4 are exact).
    const double w = 1.0 / static_cast<double>(in.size() + 1);
    row.self = w;
    std::fill(row.neighbours.begin(), row.neighbours.end(), w);
    return row;
  }
  // Metropolis-Hastings. On an undirected graph W(i, j) == W(j, i) bit for bit, since
  // both evaluate the same expression; the diagonal takes what is left of the row.
  const std::size_t degree_i = in.size();
  double sum = 0;
  for (std::size_t k = 0; k < in.size(); ++k) {
    const std::size_t degree_j = g.out_neighbours(in[k], round).size();
    row.neighbours[k] = 1.0 / static_cast<double>(1 + std::max(degree_i, degree_j));
    sum += row.neighbours[k];
  }
  row.self = 1.0 - sum;
  return row;
}

std::vector<MixingRow> mixing_rows(const Topology& g, WeightScheme scheme, int rank) {
  std::vector<MixingRow> rows;
  for (std::uint64_t p = 0; p < g.period(); ++p) rows.push_back(mixing_row(g, scheme, rank, p));
  return rows;
}

namespace {

// Row `rank` of round 0's W as (offset (j − rank) mod n, weight) pairs, sorted, the
// diagonal included at offset 0.
std::vector<std::pair<int, double>> row_offsets(const Topology& g, WeightScheme scheme, int rank) {
  const MixingRow row = mixing_row(g, scheme, rank, 0);
  const std::vector<int>& in = g.in_neighbours(rank, 0);
  std::vector<std::pair<int, double>> out{{0, row.self}};
  for (std::size_t k = 0; k < in.size(); ++k)
    out.emplace_back((in[k] - rank + g.peers()) % g.peers(), row.neighbours[k]);
  std::sort(out.begin(), out.end());
  return out;
}

// Row 0's offsets when every row is row 0's shifted (W is circulant); nullopt otherwise.
std::optional<std::vector<std::pair<int, double>>> circulant_row(const Topology& g, WeightScheme scheme) {
  auto first = row_offsets(g, scheme, 0);
  for (int i = 1; i < g.peers(); ++i) {
    const auto row = row_offsets(g, scheme, i);
    if (!std::equal(row.begin(), row.end(), first.begin(), first.end(), [](const auto& a, const auto& b) {
          return a.first == b.first && std::abs(a.second - b.second) <= 1e-12;
        }))
      return std::nullopt;
  }
  return first;
}

}  // namespace

bool is_circulant(const Topology& g, WeightScheme scheme) { return circulant_row(g, scheme).has_value(); }

double mixing_reach(const Topology& g, WeightScheme scheme) {
  const int n = g.peers();
  if (n <= 1) return 0.0;
  const auto first = circulant_row(g, scheme);
  if (!first) {
    double min_self = 1.0;
    for (int i = 0; i < n; ++i) min_self = std::min(min_self, mixing_row(g, scheme, i, 0).self);
    return 2.0 * (1.0 - min_self);
  }
  // λ_k = Σ_s c_s e^(2πi sk/n), k = 1 .. n − 1 (k = 0 is the average's 1).
  constexpr double kTwoPi = 6.283185307179586476925;
  double reach = 0.0;
  for (int k = 1; k < n; ++k) {
    double re = 0.0;
    for (const auto& [s, c] : *first)
      re += c * std::cos(kTwoPi * static_cast<double>((static_cast<long long>(s) * k) % n) /
                         static_cast<double>(n));
    reach = std::max(reach, 1.0 - re);
  }
  return reach;
}

MixingMatrix MixingMatrix::weights(const Topology& g, WeightScheme scheme, std::uint64_t round) {
  MixingMatrix w(g.peers());
  for (int i = 0; i < g.peers(); ++i) {
    const MixingRow row = mixing_row(g, scheme, i, round);
    const std::vector<int>& in = g.in_neighbours(i, round);
    w(i, i) = row.self;
    for (std::size_t k = 0; k < in.size(); ++k) w(i, in[k]) = row.neighbours[k];
  }
  return w;
}

MixingMatrix MixingMatrix::push_sum(const Topology& g, std::uint64_t round) {
  MixingMatrix p(g.peers());
  for (int j = 0; j < g.peers(); ++j) {
    const std::vector<int>& out = g.out_neighbours(j, round);
    const double share = 1.0 / static_cast<double>(out.size() + 1);
    p(j, j) = share;
    for (int i : out) p(i, j) = share;
  }
  return p;
}

MixingMatrix MixingMatrix::identity(int n) {
  MixingMatrix m(n);
  for (int i = 0; i < n; ++i) m(i, i) = 1.0;
  return m;
}

MixingMatrix MixingMatrix::averaging(int n) {
  MixingMatrix m(n);
  std::fill(m.w_.begin(), m.w_.end(), 1.0 / static_cast<double>(n));
  return m;
}

MixingMatrix MixingMatrix::operator*(const MixingMatrix& other) const {
  if (other.n_ != n_)
    throw std::invalid_argument("mixing matrix product of a " + std::to_string(n_) + "x" +
                                std::to_string(n_) + " and a " + std::to_string(other.n_) + "x" +
                                std::to_string(other.n_) + " matrix");
  MixingMatrix product(n_);
  const std::size_t n = static_cast<std::size_t>(n_);
  for (std::size_t i = 0; i < n; ++i) {
    double* out_row = &product.w_[i * n];
    for (std::size_t k = 0; k < n; ++k) {
      const double a = w_[i * n + k];
      if (a == 0.0) continue;
      const double* b_row = &other.w_[k * n];
      for (std::size_t j = 0; j < n; ++j) out_row[j] += a * b_row[j];
    }
  }
  return product;
}

bool MixingMatrix::row_stochastic(double tol) const {
  for (int i = 0; i < n_; ++i) {
    double sum = 0;
    for (int j = 0; j < n_; ++j) {
      if ((*this)(i, j) < -tol) return false;
      sum += (*this)(i, j);
    }
    if (std::abs(sum - 1.0) > tol) return false;
  }
  return true;
}

bool MixingMatrix::column_stochastic(double tol) const {
  std::vector<double> sums(static_cast<std::size_t>(n_), 0.0);  // row by row: the storage order
  for (int i = 0; i < n_; ++i)
    for (int j = 0; j < n_; ++j) {
      if ((*this)(i, j) < -tol) return false;
      sums[static_cast<std::size_t>(j)] += (*this)(i, j);
    }
  return std::all_of(sums.begin(), sums.end(), [tol](double s) { return std::abs(s - 1.0) <= tol; });
}

bool MixingMatrix::symmetric(double tol) const {
  for (int i = 0; i < n_; ++i)
    for (int j = i + 1; j < n_; ++j)
      if (std::abs((*this)(i, j) - (*this)(j, i)) > tol) return false;
  return true;
}

double MixingMatrix::max_abs_difference(const MixingMatrix& other) const {
  if (other.n_ != n_)
    throw std::invalid_argument("comparing a " + std::to_string(n_) + "x" + std::to_string(n_) + " and a " +
                                std::to_string(other.n_) + "x" + std::to_string(other.n_) + " mixing matrix");
  double worst = 0;
  for (std::size_t k = 0; k < w_.size(); ++k) worst = std::max(worst, std::abs(w_[k] - other.w_[k]));
  return worst;
}

}  // namespace hearsay::topology
