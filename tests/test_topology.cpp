// Graphs, mixing weights and spectral analysis (gossip/mixing/topology): exact neighbour lists
// of small graphs, stochasticity of the weights, and lambda2 against closed forms.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <complex>
#include <fstream>
#include <numbers>
#include <set>
#include <string>
#include <vector>

#include "gossip/mixing/topology/topology.hpp"
#include "test_support.hpp"

using namespace hearsay::topology;
using hearsay::testing::contains;
using hearsay::testing::TempPath;

namespace {

using Ranks = std::vector<int>;

GraphSpec torus_spec(int peers, int rows) {
  GraphSpec spec;
  spec.kind = GraphKind::torus;
  spec.peers = peers;
  spec.torus_rows = rows;
  return spec;
}

GraphSpec regular_spec(int peers, int degree, std::uint64_t seed) {
  GraphSpec spec;
  spec.kind = GraphKind::random_regular;
  spec.peers = peers;
  spec.degree = degree;
  spec.seed = seed;
  return spec;
}

GraphSpec file_spec(const std::string& path, bool directed = false, int peers = 0) {
  GraphSpec spec;
  spec.kind = GraphKind::file;
  spec.file = path;
  spec.directed = directed;
  spec.peers = peers;
  return spec;
}

Topology make(GraphKind kind, int peers, bool directed = false) {
  GraphSpec spec;
  spec.kind = kind;
  spec.peers = peers;
  spec.directed = directed;
  return Topology::make(spec);
}

// An edge-list file with the given text; removed with the TempPath.
struct EdgeFile {
  TempPath dir;
  std::string path;
  explicit EdgeFile(const std::string& text) : path(dir.file("edges.txt")) {
    std::filesystem::create_directories(dir.path());
    std::ofstream(path) << text;
  }
};

Topology from_file(const std::string& path, bool directed = false, int peers = 0) {
  return Topology::make(file_spec(path, directed, peers));
}

// The message of the TopologyFileError that building from text throws ("" if none).
std::string file_error(const std::string& text, bool directed = false, int peers = 0) {
  EdgeFile f(text);
  try {
    from_file(f.path, directed, peers);
  } catch (const TopologyFileError& e) {
    return e.what();
  }
  return "";
}

// Every in-list is the transpose of the out-lists, and no list holds its own rank.
void check_consistent(const Topology& g) {
  for (std::uint64_t r = 0; r < g.period(); ++r)
    for (int i = 0; i < g.peers(); ++i) {
      for (int j : g.out_neighbours(i, r)) {
        CHECK(j != i);
        const Ranks& in = g.in_neighbours(j, r);
        CHECK(std::find(in.begin(), in.end(), i) != in.end());
      }
      CHECK(std::is_sorted(g.out_neighbours(i, r).begin(), g.out_neighbours(i, r).end()));
      if (!g.directed()) CHECK(g.in_neighbours(i, r) == g.out_neighbours(i, r));
    }
}

}  // namespace

TEST_CASE("graph names parse, with aliases, and unknown names list the valid ones", "[topology]") {
  for (GraphKind k : {GraphKind::ring, GraphKind::torus, GraphKind::exp, GraphKind::onepeer_exp,
                      GraphKind::complete, GraphKind::random_regular, GraphKind::file})
    CHECK(parse_graph_kind(to_string(k)) == k);
  CHECK(parse_graph_kind("exponential") == GraphKind::exp);
  CHECK(parse_graph_kind("one-peer-exp") == GraphKind::onepeer_exp);
  try {
    parse_graph_kind("hypercube");
    FAIL("no exception");
  } catch (const TopologyError& e) {
    CHECK(contains(e.what(), "hypercube"));
    CHECK(contains(e.what(), "onepeer-exp"));
  }
  CHECK(parse_weight_scheme("metropolis") == WeightScheme::metropolis);
  CHECK_THROWS_AS(parse_weight_scheme("max-degree"), TopologyError);
}

TEST_CASE("ring neighbours, undirected and directed, and tiny rings", "[topology]") {
  const Topology g = make(GraphKind::ring, 5);
  CHECK(g.out_neighbours(0) == Ranks{1, 4});
  CHECK(g.out_neighbours(2) == Ranks{1, 3});
  CHECK(g.in_neighbours(4) == Ranks{0, 3});
  CHECK(g.edge_count() == 5);
  CHECK_FALSE(g.directed());
  CHECK(g.period() == 1);
  check_consistent(g);

  const Topology d = make(GraphKind::ring, 5, true);
  CHECK(d.out_neighbours(4) == Ranks{0});
  CHECK(d.in_neighbours(0) == Ranks{4});
  CHECK(d.edge_count() == 5);
  check_consistent(d);

  CHECK(make(GraphKind::ring, 2).out_neighbours(0) == Ranks{1});  // i+1 == i-1: one edge
  CHECK(make(GraphKind::ring, 2).edge_count() == 1);
  CHECK(make(GraphKind::ring, 1).out_neighbours(0).empty());
  CHECK_THROWS_AS(make(GraphKind::ring, 0), TopologyError);
  CHECK_THROWS_AS(make(GraphKind::ring, kMaxPeers + 1), TopologyError);
  CHECK_THROWS_AS(g.out_neighbours(5), std::out_of_range);
  CHECK_THROWS_AS(g.in_neighbours(-1), std::out_of_range);
}

TEST_CASE("torus neighbours: 3x4, the 2xk dedupe, directed, and sizes that do not factor", "[topology]") {
  GraphSpec spec = torus_spec(12, 3);
  const Topology g = Topology::make(spec);
  // rank = row * 4 + col
  CHECK(g.out_neighbours(0) == Ranks{1, 3, 4, 8});
  CHECK(g.out_neighbours(5) == Ranks{1, 4, 6, 9});
  CHECK(g.edge_count() == 24);
  check_consistent(g);
  CHECK(contains(g.describe(), "3x4"));

  spec.directed = true;
  const Topology d = Topology::make(spec);
  CHECK(d.out_neighbours(0) == Ranks{1, 4});
  CHECK(d.out_neighbours(11) == Ranks{3, 8});
  CHECK(d.in_neighbours(0) == Ranks{3, 8});
  check_consistent(d);

  // 2x3: up and down are the same rank, so each rank has 3 neighbours, not 4.
  const Topology two = Topology::make(torus_spec(6, 2));
  CHECK(two.out_neighbours(0) == Ranks{1, 2, 3});
  CHECK(two.out_neighbours(4) == Ranks{1, 3, 5});
  check_consistent(two);

  // Default rows: the most square factorisation.
  CHECK(Topology::make(torus_spec(16, 0)).spec().torus_rows == 4);
  CHECK(Topology::make(torus_spec(12, 0)).spec().torus_rows == 3);
  CHECK_THROWS_AS(make(GraphKind::torus, 7), TopologyError);  // prime
  CHECK_THROWS_AS(Topology::make(torus_spec(12, 5)), TopologyError);
  CHECK_THROWS_AS(Topology::make(torus_spec(12, 12)), TopologyError);
}

TEST_CASE("exponential graph: i -> i + 2^k for k < ceil(log2 n), always directed", "[topology]") {
  const Topology g = make(GraphKind::exp, 8);  // asked undirected: exp is directed by nature
  CHECK(g.directed());
  CHECK(g.out_neighbours(0) == Ranks{1, 2, 4});
  CHECK(g.out_neighbours(6) == Ranks{0, 2, 7});
  CHECK(g.in_neighbours(0) == Ranks{4, 6, 7});
  CHECK(g.edge_count() == 24);
  check_consistent(g);
  // n = 6: ceil(log2 6) = 3, offsets 1, 2, 4.
  const Topology six = make(GraphKind::exp, 6);
  CHECK(six.out_neighbours(5) == Ranks{0, 1, 3});
  check_consistent(six);
  CHECK(make(GraphKind::exp, 2).out_neighbours(1) == Ranks{0});
}

TEST_CASE("one-peer exponential graph: one partner per round, period log2 n", "[topology]") {
  const Topology g = make(GraphKind::onepeer_exp, 8);
  CHECK(g.directed());
  REQUIRE(g.period() == 3);
  CHECK(g.time_varying());
  for (std::uint64_t r = 0; r < 7; ++r)
    for (int i = 0; i < 8; ++i) {
      const int partner = (i + (1 << (r % 3))) % 8;
      CHECK(g.out_neighbours(i, r) == Ranks{partner});
      CHECK(g.in_neighbours(partner, r) == Ranks{i});
    }
  check_consistent(g);
  CHECK(make(GraphKind::onepeer_exp, 5).period() == 3);
  CHECK(contains(g.describe(), "period 3"));
}

TEST_CASE("complete graph: everyone else, always undirected", "[topology]") {
  const Topology g = make(GraphKind::complete, 4, true);
  CHECK_FALSE(g.directed());
  CHECK(g.out_neighbours(2) == Ranks{0, 1, 3});
  CHECK(g.edge_count() == 6);
  check_consistent(g);
}

TEST_CASE("random regular graphs: k-regular, simple, connected, seeded", "[topology]") {
  struct Case {
    int n, k;
  };
  for (const Case c :
       {Case{10, 2}, Case{10, 3}, Case{16, 4}, Case{50, 3}, Case{31, 6}, Case{12, 11}, Case{2, 1}}) {
    INFO("n " << c.n << " k " << c.k);
    const GraphSpec spec = regular_spec(c.n, c.k, 7);
    const Topology g = Topology::make(spec);  // make() refuses disconnected graphs itself
    CHECK_FALSE(g.directed());
    for (int i = 0; i < c.n; ++i) {
      const Ranks& nb = g.out_neighbours(i);
      CHECK(static_cast<int>(nb.size()) == c.k);  // sorted, deduplicated: k distinct partners
      CHECK(std::set<int>(nb.begin(), nb.end()).size() == nb.size());
    }
    CHECK(g.edge_count() == static_cast<std::size_t>(c.n * c.k / 2));
    check_consistent(g);
    // The same seed gives the same graph.
    const Topology again = Topology::make(spec);
    for (int i = 0; i < c.n; ++i) CHECK(again.out_neighbours(i) == g.out_neighbours(i));
  }
  // Different seeds give different graphs (for a size with many 3-regular graphs).
  const Topology a = Topology::make(regular_spec(40, 3, 1));
  const Topology b = Topology::make(regular_spec(40, 3, 2));
  bool differ = false;
  for (int i = 0; i < 40; ++i) differ = differ || a.out_neighbours(i) != b.out_neighbours(i);
  CHECK(differ);

  const auto impossible = [](int n, int k) { return Topology::make(regular_spec(n, k, 0)); };
  CHECK_THROWS_AS(impossible(9, 3), TopologyError);  // k * n odd
  CHECK_THROWS_AS(impossible(8, 8), TopologyError);  // k >= n
  CHECK_THROWS_AS(impossible(8, 0), TopologyError);  // no degree
  CHECK_THROWS_AS(impossible(8, 1), TopologyError);  // a perfect matching is never connected
}

TEST_CASE("edge-list files: comments, blank lines, peers from the file, directed", "[topology]") {
  EdgeFile f(
      "# a star around 0 plus a tail\n"
      "0 1\n"
      "\n"
      "0 2   # spaces and a comment\n"
      "\t0\t3\r\n"
      "3 4\n"
      "1 0\n");  // duplicate of 0 1 (undirected): kept once
  const Topology g = from_file(f.path);
  CHECK(g.peers() == 5);
  CHECK(g.out_neighbours(0) == Ranks{1, 2, 3});
  CHECK(g.out_neighbours(3) == Ranks{0, 4});
  CHECK(g.out_neighbours(4) == Ranks{3});
  CHECK(g.edge_count() == 4);
  check_consistent(g);
  CHECK(contains(g.describe(), "edges.txt"));

  EdgeFile cycle("0 1\n1 2\n2 0\n");
  const Topology d = from_file(cycle.path, true);
  CHECK(d.directed());
  CHECK(d.out_neighbours(0) == Ranks{1});
  CHECK(d.in_neighbours(0) == Ranks{2});
  CHECK(from_file(cycle.path, false, 3).peers() == 3);
}

TEST_CASE("edge-list errors name the file and line", "[topology]") {
  std::string e = file_error("0 1\n1 x\n");
  CHECK(contains(e, "edges.txt:2:"));
  CHECK(contains(e, "1 x"));
  CHECK(contains(file_error("0 1\n\n1 2 3\n"), "edges.txt:3:"));
  CHECK(contains(file_error("0 1.5\n"), "edges.txt:1:"));
  CHECK(contains(file_error("0 -1\n"), "edges.txt:1:"));

  e = file_error("0 1\n# fine\n2 2\n1 2\n");
  CHECK(contains(e, "edges.txt:3:"));
  CHECK(contains(e, "self loop"));

  e = file_error("0 1\n1 2\n2 9\n", false, 4);
  CHECK(contains(e, "edges.txt:3:"));
  CHECK(contains(e, "out of range"));
  CHECK(contains(e, "9"));
  CHECK(contains(file_error("0 99999999999999999999999\n"), "edges.txt:1:"));

  // Two components: {0, 1} and {2, 3}.
  e = file_error("0 1\n2 3\n");
  CHECK(contains(e, "edges.txt"));
  CHECK(contains(e, "disconnected"));
  CHECK(contains(e, "2, 3"));
  // A rank that appears in no edge (peers given) is cut off too.
  CHECK(contains(file_error("0 1\n1 2\n", false, 4), "disconnected"));
  // Directed: 0 -> 1 -> 2 reaches everyone from 0, but nothing comes back.
  CHECK(contains(file_error("0 1\n1 2\n", true), "not strongly connected"));
  CHECK(contains(file_error("# nothing\n"), "no edges"));

  TempPath missing;
  try {
    from_file(missing.file("nope.txt"));
    FAIL("no exception");
  } catch (const TopologyFileError& err) {
    CHECK(contains(err.what(), "nope.txt"));
  }
  CHECK_THROWS_AS(Topology::make(file_spec("")), TopologyError);  // no file at all
}

TEST_CASE("mixing weights are row-stochastic, doubly on regular graphs, push-sum is column-stochastic",
          "[topology]") {
  std::vector<Topology> regular{make(GraphKind::ring, 7),     make(GraphKind::ring, 7, true),
                                make(GraphKind::torus, 12),   make(GraphKind::exp, 12),
                                make(GraphKind::complete, 5), make(GraphKind::onepeer_exp, 8)};
  regular.push_back(Topology::make(regular_spec(14, 5, 3)));
  for (const Topology& g : regular) {
    INFO(g.describe());
    for (std::uint64_t r = 0; r < g.period(); ++r) {
      for (WeightScheme s : {WeightScheme::uniform, WeightScheme::metropolis}) {
        const MixingMatrix w = MixingMatrix::weights(g, s, r);
        CHECK(w.doubly_stochastic());
        // Weights only on self and in-neighbours.
        for (int i = 0; i < g.peers(); ++i)
          for (int j = 0; j < g.peers(); ++j) {
            const Ranks& in = g.in_neighbours(i, r);
            if (i != j && std::find(in.begin(), in.end(), j) == in.end()) CHECK(w(i, j) == 0.0);
          }
      }
      CHECK(MixingMatrix::push_sum(g, r).column_stochastic());
    }
    if (!g.directed()) CHECK(MixingMatrix::weights(g, WeightScheme::uniform).symmetric());
  }
  // The uniform row of a ring is 1/3 everywhere, bit for bit what an algorithm applies.
  const MixingRow row = mixing_row(make(GraphKind::ring, 7), WeightScheme::uniform, 3);
  CHECK(row.self == 1.0 / 3.0);
  CHECK(row.neighbours == std::vector<double>{1.0 / 3.0, 1.0 / 3.0});
}

TEST_CASE("Metropolis weights are doubly stochastic on an irregular undirected graph, uniform are not",
          "[topology]") {
  // Degrees 1..4: a hub, a path and a triangle.
  EdgeFile f("0 1\n0 2\n0 3\n0 4\n4 5\n5 6\n6 4\n2 3\n");
  const Topology g = from_file(f.path);
  const MixingMatrix metropolis = MixingMatrix::weights(g, WeightScheme::metropolis);
  CHECK(metropolis.row_stochastic());
  CHECK(metropolis.column_stochastic());
  CHECK(metropolis.symmetric());
  CHECK(metropolis(0, 4) == 1.0 / 5.0);  // 1 / (1 + max(4, 3))
  CHECK(metropolis(1, 0) == 1.0 / 5.0);
  CHECK(metropolis(1, 1) == Approx(4.0 / 5.0).epsilon(1e-15));
  const MixingMatrix uniform = MixingMatrix::weights(g, WeightScheme::uniform);
  CHECK(uniform.row_stochastic());
  CHECK_FALSE(uniform.column_stochastic());
  CHECK_FALSE(uniform.symmetric());
  // Push-sum on a directed irregular graph: columns sum to 1, rows do not.
  EdgeFile d("0 1\n0 2\n1 2\n2 0\n");
  const MixingMatrix p = MixingMatrix::push_sum(from_file(d.path, true));
  CHECK(p.column_stochastic());
  CHECK_FALSE(p.row_stochastic());
  CHECK(p(1, 0) == 1.0 / 3.0);
}

TEST_CASE("matrix product, identity and averaging", "[topology]") {
  const MixingMatrix w = MixingMatrix::weights(make(GraphKind::ring, 6), WeightScheme::uniform);
  CHECK((w * MixingMatrix::identity(6)).max_abs_difference(w) == 0.0);
  CHECK((MixingMatrix::identity(6) * w).max_abs_difference(w) == 0.0);
  // Averaging absorbs any doubly stochastic factor (to round-off of six 1/6 terms).
  CHECK((w * MixingMatrix::averaging(6)).max_abs_difference(MixingMatrix::averaging(6)) < 1e-15);
  CHECK_THROWS_AS(w * MixingMatrix::identity(5), std::invalid_argument);
  CHECK_THROWS_AS(w.max_abs_difference(MixingMatrix(5)), std::invalid_argument);
}

TEST_CASE("ring with weights 1/3: lambda2 = (1 + 2 cos(2 pi / n)) / 3", "[topology]") {
  for (int n : {5, 8, 16, 33, 100}) {
    const SpectralSummary s = analyse(make(GraphKind::ring, n), WeightScheme::uniform);
    const double expected = (1.0 + 2.0 * std::cos(2.0 * std::numbers::pi / n)) / 3.0;
    INFO("n " << n);
    CHECK(s.lambda2 == Approx(expected).margin(1e-12));  // symmetric eigensolver: round-off ~1e-15
    CHECK(s.spectral_gap == Approx(1.0 - expected).margin(1e-12));
    CHECK(s.doubly_stochastic);
    CHECK(s.converges);
    CHECK(s.max_degree == 2);
    CHECK(s.mean_degree == 2.0);
    // rounds_to_1000x is the first t with lambda2^t <= 1e-3.
    const auto t = static_cast<double>(s.rounds_to_1000x);
    CHECK(std::pow(expected, t) <= 1e-3);
    CHECK(std::pow(expected, t - 1) > 1e-3);
  }
  // Directed ring with weights 1/2: eigenvalues (1 + w^j) / 2, second modulus cos(pi / n).
  for (int n : {5, 12}) {
    const SpectralSummary s = analyse(make(GraphKind::ring, n, true), WeightScheme::uniform);
    CHECK(s.lambda2 == Approx(std::cos(std::numbers::pi / n)).margin(1e-12));
  }
}

TEST_CASE("static exponential graph, uniform weights: spectral gap 2 / (1 + log2 n)", "[topology]") {
  for (int n : {4, 8, 16, 32}) {
    const SpectralSummary s = analyse(make(GraphKind::exp, n), WeightScheme::uniform);
    const double log2n = std::log2(n);
    INFO("n " << n);
    CHECK(s.spectral_gap == Approx(2.0 / (1.0 + log2n)).margin(1e-12));
    CHECK(s.max_degree == static_cast<int>(log2n));
    CHECK(s.doubly_stochastic);
  }
  CHECK(analyse(make(GraphKind::exp, 16), WeightScheme::uniform).spectral_gap == Approx(0.4).margin(1e-12));
}

TEST_CASE("torus with weights 1/5: lambda2 from the 2-D Fourier modes", "[topology]") {
  // W = (I + shifts in 4 directions) / 5; its eigenvalues are
  // (1 + 2 cos(2 pi a / R) + 2 cos(2 pi b / C)) / 5 over all modes (a, b) != (0, 0).
  for (int rows : {3, 4, 5}) {
    const int cols = rows + 2, n = rows * cols;
    const SpectralSummary s = analyse(Topology::make(torus_spec(n, rows)), WeightScheme::uniform);
    double expected = 0;
    for (int a = 0; a < rows; ++a)
      for (int b = 0; b < cols; ++b)
        if (a || b)
          expected = std::max(expected, std::abs(1 + 2 * std::cos(2 * std::numbers::pi * a / rows) +
                                                 2 * std::cos(2 * std::numbers::pi * b / cols)) /
                                            5);
    INFO(rows << "x" << cols);
    CHECK(s.lambda2 == Approx(expected).margin(1e-12));
  }
}

TEST_CASE("one-peer exponential graph: the product over log2 n rounds is the exact average", "[topology]") {
  for (int n : {2, 4, 8, 16, 32}) {
    const Topology g = make(GraphKind::onepeer_exp, n);
    MixingMatrix product = MixingMatrix::identity(n);
    for (std::uint64_t r = 0; r < g.period(); ++r) {
      const MixingMatrix w = MixingMatrix::weights(g, WeightScheme::uniform, r);
      CHECK(w(0, 0) == 0.5);
      product = w * product;
    }
    INFO("n " << n);
    CHECK(product.max_abs_difference(MixingMatrix::averaging(n)) <= 1e-12);
    // One round short of the period is not yet the average: each rank then holds weight
    // 2/n on half of the ranks and 0 on the others, 1/n away from the average.
    if (n > 2) {
      MixingMatrix partial = MixingMatrix::identity(n);
      for (std::uint64_t r = 0; r + 1 < g.period(); ++r)
        partial = MixingMatrix::weights(g, WeightScheme::uniform, r) * partial;
      CHECK(partial.max_abs_difference(MixingMatrix::averaging(n)) == Approx(1.0 / n).epsilon(1e-12));
    }
    const SpectralSummary s = analyse(g, WeightScheme::uniform);
    CHECK(s.lambda2 == 0.0);
    CHECK(s.rounds_to_1000x == g.period());
    CHECK(s.max_degree == 1);
  }
  CHECK(analyse(make(GraphKind::onepeer_exp, 16), WeightScheme::uniform).rounds_to_1000x == 4);
  // Not a power of two: no exact average, but it mixes.
  const SpectralSummary s = analyse(make(GraphKind::onepeer_exp, 12), WeightScheme::uniform);
  CHECK(s.lambda2 > 0.0);
  CHECK(s.lambda2 < 1.0);
}

TEST_CASE("complete graph: lambda2 = 0, consensus in one round", "[topology]") {
  for (int n : {2, 3, 7, 16}) {
    const SpectralSummary s = analyse(make(GraphKind::complete, n), WeightScheme::uniform);
    CHECK(s.lambda2 == 0.0);
    CHECK(s.spectral_gap == 1.0);
    CHECK(s.rounds_to_1000x == 1);
  }
  const SpectralSummary one = analyse(make(GraphKind::ring, 1), WeightScheme::uniform);
  CHECK(one.lambda2 == 0.0);
  CHECK(one.converges);
}

TEST_CASE("a star: row-stochastic only (uniform) against doubly stochastic (Metropolis)", "[topology]") {
  // Star with centre 0 and n-1 leaves. Uniform: leaves keep 1/2, so any difference between
  // two leaves halves each round: lambda2 = 1/2 (the other eigenvalues are 1 and 1/n - 1/2).
  // Metropolis: a leaf keeps 1 - 1/n: lambda2 = 1 - 1/n.
  for (int n : {4, 9}) {
    std::string text;
    for (int leaf = 1; leaf < n; ++leaf) text += "0 " + std::to_string(leaf) + "\n";
    EdgeFile f(text);
    const Topology g = from_file(f.path);
    const SpectralSummary uniform = analyse(g, WeightScheme::uniform);
    CHECK_FALSE(uniform.doubly_stochastic);
    CHECK(uniform.lambda2 == Approx(0.5).margin(1e-12));
    const SpectralSummary metropolis = analyse(g, WeightScheme::metropolis);
    CHECK(metropolis.doubly_stochastic);
    CHECK(metropolis.lambda2 == Approx(1.0 - 1.0 / n).margin(1e-12));
    CHECK(metropolis.max_degree == n - 1);
    CHECK(metropolis.mean_degree == Approx(2.0 * (n - 1) / n).epsilon(1e-15));
  }
}

TEST_CASE("a directed graph whose weights are not doubly stochastic uses W's own eigenvalues", "[topology]") {
  // 0 -> 1 -> 2 -> 0 plus 0 -> 2: in-degrees 1, 1, 2, uniform weights
  //   W = [[1/2, 0, 1/2], [1/2, 1/2, 0], [1/3, 1/3, 1/3]]; characteristic polynomial
  //   (x - 1)(x^2 - x/3 + 1/12): the other eigenvalues have modulus sqrt(1/12).
  EdgeFile f("0 1\n1 2\n2 0\n0 2\n");
  const SpectralSummary s = analyse(from_file(f.path, true), WeightScheme::uniform);
  CHECK_FALSE(s.doubly_stochastic);
  CHECK(s.lambda2 == Approx(std::sqrt(1.0 / 12.0)).margin(1e-12));
  CHECK(s.max_degree == 2);
  CHECK(s.mean_degree == Approx(4.0 / 3.0).epsilon(1e-15));
}
