// topology::mixing_reach, the bound CHOCO's look-ahead takes its size from: exact on
// circulant graphs and an upper bound on the others, against Eigen's eigenvalues of the
// dense W.
#include <Eigen/Dense>
#include <catch2/catch.hpp>
#include <cmath>
#include <string>

#include "gossip/mixing/algorithms/choco.hpp"
#include "gossip/mixing/topology/topology.hpp"

using namespace hearsay::topology;

namespace {

Topology make(GraphKind kind, int peers, bool directed = false, int degree = 0, int rows = 0) {
  GraphSpec spec;
  spec.kind = kind;
  spec.peers = peers;
  spec.directed = directed;
  spec.degree = degree;
  spec.seed = 3;
  spec.torus_rows = rows;
  return Topology::make(spec);
}

// max Re(1 − λ) over W's eigenvalues but the one at 1 (every graph here is connected, so
// there is one), from the dense matrix.
double exact_reach(const Topology& g, WeightScheme scheme) {
  const MixingMatrix w = MixingMatrix::weights(g, scheme, 0);
  const int n = w.size();
  Eigen::MatrixXd m(n, n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) m(i, j) = w(i, j);
  Eigen::EigenSolver<Eigen::MatrixXd> solver(m, false);
  REQUIRE(solver.info() == Eigen::Success);
  std::vector<double> re;
  for (Eigen::Index k = 0; k < n; ++k) re.push_back(solver.eigenvalues()[k].real());
  std::sort(re.begin(), re.end());
  re.pop_back();  // the average's 1, the largest real part
  return 1.0 - re.front();
}

}  // namespace

TEST_CASE("mixing_reach is exact on circulant graphs", "[topology]") {
  struct Case {
    std::string name;
    Topology g;
    double closed_form;  // 0: none written down
  };
  const Case cases[] = {
      {"ring 8", make(GraphKind::ring, 8), 4.0 / 3},  // λ = (1 + 2 cos(πk/4)) / 3, lowest −1/3
      {"ring 7", make(GraphKind::ring, 7), 1 - (1 + 2 * std::cos(6 * M_PI / 7)) / 3},
      {"directed ring 8", make(GraphKind::ring, 8, true), 1.0},  // (1 + e^(iπk/4)) / 2, real part down to 0
      {"exp 8", make(GraphKind::exp, 8), 0},
      {"exp 64", make(GraphKind::exp, 64), 0},
      {"exp 12", make(GraphKind::exp, 12), 0},
      {"complete 8", make(GraphKind::complete, 8), 1.0},  // every other eigenvalue is 0
  };
  for (const auto& c : cases)
    for (const WeightScheme scheme : {WeightScheme::uniform, WeightScheme::metropolis}) {
      if (c.g.directed() && scheme == WeightScheme::metropolis) continue;
      INFO(c.name << ", " << to_string(scheme));
      CHECK(is_circulant(c.g, scheme));
      const double reach = mixing_reach(c.g, scheme);
      CHECK(reach == Approx(exact_reach(c.g, scheme)).margin(1e-9));
      if (c.closed_form > 0) CHECK(reach == Approx(c.closed_form).margin(1e-12));
    }
  // exp(8): λ_k = (1 + ω^k + ω^2k + ω^4k) / 4 with ω = e^(iπ/4); at k = 3 it is
  // (ω^3 + ω^6) / 4, real part −2^½ / 8, the lowest.
  CHECK(mixing_reach(make(GraphKind::exp, 8), WeightScheme::uniform) ==
        Approx(1 + std::sqrt(2.0) / 8).margin(1e-12));
}

TEST_CASE("mixing_reach bounds the others from above, by at most 2", "[topology]") {
  struct Case {
    std::string name;
    Topology g;
  };
  const Case cases[] = {
      {"torus 3x4", make(GraphKind::torus, 12, false, 0, 3)},
      {"torus 4x4, directed", make(GraphKind::torus, 16, true, 0, 4)},
      {"random 3-regular, 10", make(GraphKind::random_regular, 10, false, 3)},
      {"random 4-regular, 33", make(GraphKind::random_regular, 33, false, 4)},
  };
  for (const auto& c : cases)
    for (const WeightScheme scheme : {WeightScheme::uniform, WeightScheme::metropolis}) {
      if (c.g.directed() && scheme == WeightScheme::metropolis) continue;
      INFO(c.name << ", " << to_string(scheme));
      CHECK_FALSE(is_circulant(c.g, scheme));
      const double reach = mixing_reach(c.g, scheme);
      CHECK(reach >= exact_reach(c.g, scheme) - 1e-9);
      CHECK(reach <= 2.0);
      // The look-ahead it gives stays within [½, 1].
      const double kappa = hearsay::algorithms::Choco::lookahead_for(reach);
      CHECK(kappa >= 0.5);
      CHECK(kappa <= 1.0);
    }
  // One peer: nothing to reach.
  CHECK(mixing_reach(make(GraphKind::complete, 1), WeightScheme::uniform) == 0.0);
  CHECK(hearsay::algorithms::Choco::lookahead_for(mixing_reach(
            make(GraphKind::exp, 8), WeightScheme::uniform)) == Approx(8 / (8 + std::sqrt(2.0))));
}
