// How fast gossip on a graph reaches consensus: the second-largest eigenvalue modulus of
// its mixing matrix, by Eigen's dense eigenvalue solvers.
#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "base/rng.hpp"
#include "gossip/mixing/topology/topology.hpp"

namespace hearsay::topology {

namespace {

// See analyse() in topology.hpp: moduli below this are round-off of an exact zero.
constexpr double kNumericalZero = 1e-10;
// Row and column sums this close to 1 make W doubly stochastic (products over a period
// accumulate a few ulps per round).
constexpr double kStochasticTol = 1e-9;

// Eigenvalue moduli of a general square matrix, largest first.
std::vector<double> moduli(const Eigen::MatrixXd& m, const std::string& what) {
  Eigen::EigenSolver<Eigen::MatrixXd> solver(m, /*computeEigenvectors=*/false);
  if (solver.info() != Eigen::Success)
    throw TopologyError("the eigenvalue solver did not converge for the mixing matrix of " + what);
  std::vector<double> out;
  out.reserve(static_cast<std::size_t>(m.rows()));
  for (Eigen::Index k = 0; k < solver.eigenvalues().size(); ++k)
    out.push_back(std::abs(solver.eigenvalues()[k]));
  std::sort(out.begin(), out.end(), std::greater<>());
  return out;
}

// Whether M M^T == M^T M, probed with two random vectors: O(n^2) instead of two O(n^3)
// products. A non-normal mixing matrix differs by at least about (1/n)^2 per entry, far
// above the 1e-12 relative round-off allowed here, and a random probe misses a non-zero
// difference with probability 0.
bool is_normal(const Eigen::MatrixXd& m) {
  Rng rng(0x6e6f726d616cULL);
  for (int probe = 0; probe < 2; ++probe) {
    Eigen::VectorXd v(m.cols());
    for (Eigen::Index k = 0; k < v.size(); ++k) v(k) = rng.normal();
    const Eigen::VectorXd mt_v = m.transpose() * v, m_v = m * v;
    const Eigen::VectorXd diff = m * mt_v - m.transpose() * m_v;
    if (diff.norm() > 1e-12 * v.norm()) return false;
  }
  return true;
}

// The second-largest eigenvalue modulus of W (a single round, or a period's product).
double second_modulus(const MixingMatrix& w, bool doubly_stochastic, const std::string& what) {
  const int n = w.size();
  if (n <= 1) return 0.0;
  Eigen::MatrixXd m(n, n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) m(i, j) = w(i, j);
  if (!doubly_stochastic) return moduli(m, what)[1];  // the largest is the eigenvalue 1
  // Doubly stochastic: the eigenvalue 1 belongs to the all-ones vector on both sides, so
  // removing the averaging matrix leaves exactly the other eigenvalues (and 0).
  m.array() -= 1.0 / static_cast<double>(n);
  if (w.symmetric()) {
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> solver(m, Eigen::EigenvaluesOnly);
    if (solver.info() != Eigen::Success)
      throw TopologyError("the eigenvalue solver did not converge for the mixing matrix of " + what);
    return solver.eigenvalues().cwiseAbs().maxCoeff();
  }
  // A normal matrix's eigenvalue moduli are its singular values. Every circulant graph
  // (directed ring, exponential graphs, directed torus) is normal, and the SVD is an
  // order of magnitude faster than the general eigensolver (about 1 s against 13 s at
  // n = 1024) with the same accuracy.
  if (is_normal(m)) return Eigen::BDCSVD<Eigen::MatrixXd>(m).singularValues()(0);
  return moduli(m, what)[0];
}

}  // namespace

SpectralSummary analyse(const Topology& g, WeightScheme scheme) {
  SpectralSummary s;
  const std::uint64_t period = std::max<std::uint64_t>(1, g.period());
  // One period's product W_{p-1} ... W_1 W_0 (x_{r+1} = W_r x_r); each factor is sparse.
  MixingMatrix w = MixingMatrix::weights(g, scheme, 0);
  for (std::uint64_t r = 1; r < period; ++r) w = MixingMatrix::weights(g, scheme, r) * w;

  std::size_t degree_sum = 0;
  for (std::uint64_t r = 0; r < period; ++r)
    for (int i = 0; i < g.peers(); ++i) {
      const std::size_t d = g.out_neighbours(i, r).size();
      s.max_degree = std::max(s.max_degree, static_cast<int>(d));
      degree_sum += d;
    }
  s.mean_degree =
      g.peers() > 0 ? static_cast<double>(degree_sum) / static_cast<double>(period * g.peers()) : 0.0;

  s.doubly_stochastic = w.doubly_stochastic(kStochasticTol);
  double product_lambda = second_modulus(w, s.doubly_stochastic, g.describe());
  if (product_lambda < kNumericalZero) product_lambda = 0.0;
  product_lambda = std::min(product_lambda, 1.0);  // a stochastic matrix has none above 1; round-off may

  s.lambda2 = period > 1 ? std::pow(product_lambda, 1.0 / static_cast<double>(period)) : product_lambda;
  s.spectral_gap = 1.0 - s.lambda2;
  s.converges = product_lambda < 1.0 - kNumericalZero;
  if (!s.converges) {
    s.rounds_to_1000x = 0;
  } else if (product_lambda == 0.0) {
    s.rounds_to_1000x = period;
  } else {
    // Periods until product_lambda^t <= 1e-3; the small slack keeps an exact integer
    // quotient (lambda = 0.1: 3 periods) from rounding up to the next one.
    const double periods = std::log(1000.0) / -std::log(product_lambda);
    s.rounds_to_1000x = period * static_cast<std::uint64_t>(std::max(1.0, std::ceil(periods - 1e-9)));
  }
  return s;
}

}  // namespace hearsay::topology
