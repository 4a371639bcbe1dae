// Communication graphs between the ranks 0..n-1 of a run, and their mixing weights.
//
// A Topology says, for every round, whom each rank sends to (out-neighbours) and
// receives from (in-neighbours). Most graphs are static; the one-peer exponential graph
// is time-varying with period log2(n): in round r rank i talks only to i + 2^(r mod
// log2 n). Undirected graphs have in == out.
//
// The mixing matrix W of a round is row-stochastic: x_i <- sum_j W(i, j) x_j, where
// W(i, j) > 0 only for j == i and j in in_neighbours(i). Push-sum instead uses a
// column-stochastic P: rank j splits its mass among itself and its out-neighbours,
// P(i, j) = 1 / (out_degree(j) + 1).
#pragma once
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace hearsay::topology {

// A graph that cannot be built: bad name, size, degree or edge-list file. The message
// says what to change.
class TopologyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// An edge-list file that cannot be opened or read, or whose content is not a valid
// graph; the message starts with "FILE:LINE:" (or "FILE:" for whole-file problems).
class TopologyFileError : public TopologyError {
 public:
  using TopologyError::TopologyError;
};

// Most peers a graph may have: mixing matrices are dense n x n and analyse() is O(n^3).
inline constexpr int kMaxPeers = 4096;

enum class GraphKind {
  ring,            // i <-> i±1 (directed: i -> i+1)
  torus,           // 2-D torus rows x cols, 4 neighbours (directed: right and down)
  exp,             // static exponential (Ying et al. 2021): i -> i + 2^k mod n, k = 0..ceil(log2 n)-1
  onepeer_exp,     // one-peer exponential: round r: i -> i + 2^(r mod ceil(log2 n))
  complete,        // everyone
  random_regular,  // random k-regular, undirected, seeded
  file,            // edge list file
};
// "ring", "torus", "exp", "onepeer-exp", "complete", "random-regular", "file".
std::string_view to_string(GraphKind kind);
// Parses the names above (also "exponential", "one-peer-exp"); TopologyError listing
// the valid names otherwise.
GraphKind parse_graph_kind(std::string_view name);

struct GraphSpec {
  GraphKind kind = GraphKind::ring;
  int peers = 0;
  // exp and onepeer_exp are directed by nature (the paper's graphs); ring, torus and
  // file may be either. complete and random_regular are always undirected.
  bool directed = false;
  int degree = 0;          // random_regular: k (k * peers even, k < peers)
  std::uint64_t seed = 0;  // random_regular
  int torus_rows = 0;      // torus: rows (0: the most square factorisation of peers)
  // file: one edge per line "a b" (0-based ranks; '#' comments, blank lines allowed);
  // undirected unless `directed`. The number of peers is 1 + the largest rank, and
  // must equal `peers` when that is given (non-zero).
  std::filesystem::path file;
};

class Topology {
 public:
  // Builds the graph; TopologyError for anything invalid (peers < 1, a torus that does
  // not factor, k-regular impossible, a file line that is not two ranks, self loops,
  // ranks out of range, a disconnected graph). Directed graphs must be strongly
  // connected (over the union of one period's rounds). spec() afterwards holds the
  // resolved values: peers (from the file), directed (exp, onepeer_exp: true; complete,
  // random_regular: false) and torus_rows.
  static Topology make(const GraphSpec& spec);

  const GraphSpec& spec() const noexcept { return spec_; }
  int peers() const noexcept { return spec_.peers; }
  bool directed() const noexcept;
  // Rounds after which the graph sequence repeats (1 for static graphs).
  std::uint64_t period() const noexcept { return static_cast<std::uint64_t>(rounds_.size()); }
  bool time_varying() const noexcept { return period() > 1; }

  // Ranks `rank` sends to / receives from in `round`, sorted, never containing rank.
  // std::out_of_range for a rank outside 0..peers()-1.
  const std::vector<int>& out_neighbours(int rank, std::uint64_t round = 0) const;
  const std::vector<int>& in_neighbours(int rank, std::uint64_t round = 0) const;
  // Number of distinct edges of one round (an undirected edge counts once).
  std::size_t edge_count(std::uint64_t round = 0) const;
  // The same graph with every edge both ways: each round's neighbours the union of its in-
  // and out-neighbours, directed() false. For algorithms whose W must be symmetric (D²,
  // d2.hpp); an undirected graph comes back as it is.
  Topology undirected() const;
  // "exp, 16 peers, directed, degree 4" and the like.
  std::string describe() const;

 private:
  struct Round {
    std::vector<std::vector<int>> out, in;
  };
  GraphSpec spec_;
  std::vector<Round> rounds_;
};

enum class WeightScheme {
  uniform,  // W(i, j) = 1 / (in_degree(i) + 1) over i and its in-neighbours
  // Metropolis-Hastings: W(i, j) = 1 / (1 + max(deg i, deg j)), W(i, i) the rest of the
  // row; doubly stochastic on undirected graphs. Directed: deg i = in-degree of i, deg j
  // = out-degree of j.
  metropolis,
};
std::string_view to_string(WeightScheme scheme);
WeightScheme parse_weight_scheme(std::string_view name);  // "uniform", "metropolis"

// One row of the mixing matrix of a round, as an algorithm applies it:
// x_rank <- self * x_rank + sum_k neighbours[k] * x_{in_neighbours(rank, round)[k]}.
struct MixingRow {
  double self = 1.0;
  std::vector<double> neighbours;  // aligned with in_neighbours(rank, round)
};
MixingRow mixing_row(const Topology& g, WeightScheme scheme, int rank, std::uint64_t round = 0);
// rank's row of every round of the graph's period, by round % period.
std::vector<MixingRow> mixing_rows(const Topology& g, WeightScheme scheme, int rank);

// How far round 0's W reaches past the average along its sharpest disagreement: an upper
// bound on max Re(1 − λ) over W's eigenvalues λ other than the average's 1 (1 − λ_min for
// a symmetric W: 4/3 on a ring with uniform weights, 1.18 on exp(8), 1 on the complete
// graph). Exact for a circulant W (every row its predecessor's shifted by one: rings,
// exponential graphs, the complete graph), from λ_k = Σ_s W(0, s) e^(2πi sk/n); otherwise
// Gershgorin's bound 2 (1 − min_i W(i, i)), at most 2. O(n · degree), no dense matrix, so
// every peer of a thousand may compute it. 0 for a single peer. CHOCO's look-ahead
// (choco.hpp) takes its size from it.
double mixing_reach(const Topology& g, WeightScheme scheme);
// Whether round 0's W is circulant (above): where mixing_reach is exact.
bool is_circulant(const Topology& g, WeightScheme scheme);

// A dense n x n matrix of doubles (n is at most a few thousand peers).
class MixingMatrix {
 public:
  MixingMatrix() = default;
  explicit MixingMatrix(int n) : n_(n), w_(static_cast<std::size_t>(n) * n, 0.0) {}
  // Row-stochastic mixing weights of one round.
  static MixingMatrix weights(const Topology& g, WeightScheme scheme, std::uint64_t round = 0);
  // Column-stochastic push-sum weights of one round.
  static MixingMatrix push_sum(const Topology& g, std::uint64_t round = 0);
  static MixingMatrix identity(int n);
  static MixingMatrix averaging(int n);  // every entry 1/n: the exact average in one step

  int size() const noexcept { return n_; }
  double operator()(int i, int j) const { return w_[static_cast<std::size_t>(i) * n_ + j]; }
  double& operator()(int i, int j) { return w_[static_cast<std::size_t>(i) * n_ + j]; }
  // std::invalid_argument when the sizes differ. Skips zero entries of the left factor,
  // so a sparse round matrix times a dense one costs O(n^2 * degree).
  MixingMatrix operator*(const MixingMatrix& other) const;
  // Entries >= -tol and every row (column) sum within tol of 1.
  bool row_stochastic(double tol = 1e-12) const;
  bool column_stochastic(double tol = 1e-12) const;
  bool doubly_stochastic(double tol = 1e-12) const { return row_stochastic(tol) && column_stochastic(tol); }
  bool symmetric(double tol = 1e-12) const;
  // Largest |this(i, j) - other(i, j)|; std::invalid_argument when the sizes differ.
  double max_abs_difference(const MixingMatrix& other) const;

 private:
  int n_ = 0;
  std::vector<double> w_;
};

// How fast gossip on this graph reaches consensus.
struct SpectralSummary {
  // Second-largest eigenvalue modulus of W (for a time-varying graph: of the product
  // over one period, taken to the power 1/period, i.e. the mean decay per round).
  double lambda2 = 0;
  double spectral_gap = 0;  // 1 - lambda2
  // ceil(ln 1000 / -ln lambda2); 1 when lambda2 == 0; 0 when it never gets there. For a
  // time-varying graph it counts whole periods of the product (period when the product
  // is the exact average, as for the one-peer exponential graph with n a power of two).
  std::uint64_t rounds_to_1000x = 0;
  bool converges = false;  // lambda2 < 1
  int max_degree = 0;      // largest out-degree over all rounds
  double mean_degree = 0;  // mean out-degree per round
  // W (the product over one period) is doubly stochastic: mixing keeps the exact
  // network average. Otherwise lambda2 is that of the merely row-stochastic W.
  bool doubly_stochastic = false;
};
// Uses Eigen's eigenvalue solvers on the dense mixing matrix. Moduli below 1e-10 count
// as 0: that is above the solvers' round-off for n <= kMaxPeers and far below the lambda2
// of any graph that does not average exactly, so exact averaging reports lambda2 == 0.
SpectralSummary analyse(const Topology& g, WeightScheme scheme);

}  // namespace hearsay::topology
