// Graph construction: the built-in graph families, seeded random regular graphs and
// edge-list files, plus the connectivity check every graph must pass.
#include "gossip/mixing/topology/topology.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <limits>
#include <numeric>
#include <unordered_set>
#include <utility>

#include "base/rng.hpp"

namespace hearsay::topology {

namespace {

using Adjacency = std::vector<std::vector<int>>;  // per rank, the ranks it sends to

// Smallest k with 2^k >= n (0 for n = 1).
int ceil_log2(int n) {
  int k = 0;
  while ((1LL << k) < n) ++k;
  return k;
}

// Sorts each list, drops duplicates and self loops (small graphs wrap onto themselves:
// a ring of 2, a 2 x k torus).
void normalise(Adjacency& adj) {
  for (std::size_t i = 0; i < adj.size(); ++i) {
    auto& list = adj[i];
    std::erase(list, static_cast<int>(i));
    std::sort(list.begin(), list.end());
    list.erase(std::unique(list.begin(), list.end()), list.end());
  }
}

Adjacency transpose(const Adjacency& out) {
  Adjacency in(out.size());
  for (std::size_t i = 0; i < out.size(); ++i)
    for (int j : out[i]) in[static_cast<std::size_t>(j)].push_back(static_cast<int>(i));
  for (auto& list : in) std::sort(list.begin(), list.end());
  return in;
}

// Ranks reachable from `start` following `adj`.
std::vector<bool> reachable(const Adjacency& adj, int start) {
  std::vector<bool> seen(adj.size(), false);
  std::vector<int> stack{start};
  seen[static_cast<std::size_t>(start)] = true;
  while (!stack.empty()) {
    const int v = stack.back();
    stack.pop_back();
    for (int w : adj[static_cast<std::size_t>(v)])
      if (!seen[static_cast<std::size_t>(w)]) {
        seen[static_cast<std::size_t>(w)] = true;
        stack.push_back(w);
      }
  }
  return seen;
}

// "3, 5, 9" (at most the first 8, then "and N more").
std::string list_ranks(const std::vector<bool>& seen, bool want) {
  std::string s;
  int listed = 0, more = 0;
  for (std::size_t i = 0; i < seen.size(); ++i) {
    if (seen[i] != want) continue;
    if (listed < 8) {
      s += (listed ? ", " : "") + std::to_string(i);
      ++listed;
    } else {
      ++more;
    }
  }
  if (more > 0) s += " and " + std::to_string(more) + " more";
  return s;
}

// Empty when every rank reaches every other (following edges, and against them for
// directed graphs); otherwise what is cut off.
std::string connectivity_problem(const Adjacency& out, bool directed) {
  if (out.size() <= 1) return {};
  const std::vector<bool> forward = reachable(out, 0);
  if (std::find(forward.begin(), forward.end(), false) != forward.end())
    return std::string(directed ? "the graph is not strongly connected: " : "the graph is disconnected: ") +
           "rank 0 cannot reach rank(s) " + list_ranks(forward, false);
  if (directed) {
    const std::vector<bool> backward = reachable(transpose(out), 0);
    if (std::find(backward.begin(), backward.end(), false) != backward.end())
      return "the graph is not strongly connected: rank(s) " + list_ranks(backward, false) +
             " cannot reach rank 0";
  }
  return {};
}

Adjacency ring(int n, bool directed) {
  Adjacency out(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    out[static_cast<std::size_t>(i)].push_back((i + 1) % n);
    if (!directed) out[static_cast<std::size_t>(i)].push_back((i + n - 1) % n);
  }
  return out;
}

// rows x cols, rank = row * cols + col; directed: right and down only.
Adjacency torus(int rows, int cols, bool directed) {
  Adjacency out(static_cast<std::size_t>(rows) * cols);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      auto& list = out[static_cast<std::size_t>(r) * cols + c];
      list.push_back(r * cols + (c + 1) % cols);
      list.push_back(((r + 1) % rows) * cols + c);
      if (!directed) {
        list.push_back(r * cols + (c + cols - 1) % cols);
        list.push_back(((r + rows - 1) % rows) * cols + c);
      }
    }
  return out;
}

// The rows of a torus: the requested ones, or the most square factorisation.
int torus_rows(int n, int requested) {
  if (requested < 0) throw TopologyError("torus rows must be positive, not " + std::to_string(requested));
  int rows = requested;
  if (rows == 0)
    for (int d = 1; static_cast<long long>(d) * d <= n; ++d)
      if (n % d == 0) rows = d;
  if (requested > 0 && n % requested != 0)
    throw TopologyError("a torus of " + std::to_string(n) + " peers cannot have " +
                        std::to_string(requested) + " rows: the rows must divide the number of peers");
  if (rows < 2 || n / rows < 2)
    throw TopologyError("a torus needs rows x cols peers with both at least 2; " + std::to_string(n) +
                        (requested > 0 ? " peers in " + std::to_string(requested) + " rows" : " peers") +
                        " do not factor that way (use e.g. 4, 6, 8, 9 or 16 peers, or a ring)");
  return rows;
}

Adjacency exponential(int n) {
  Adjacency out(static_cast<std::size_t>(n));
  const int tau = ceil_log2(n);
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < tau; ++k)
      out[static_cast<std::size_t>(i)].push_back(static_cast<int>((i + (1LL << k)) % n));
  return out;
}

Adjacency complete(int n) {
  Adjacency out(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      if (j != i) out[static_cast<std::size_t>(i)].push_back(j);
  return out;
}

// A connected 2-regular graph is one cycle through every rank: a random order of the
// ranks, closed into a ring (swaps would disconnect it about every other time).
Adjacency random_cycle(int n, std::uint64_t seed) {
  std::vector<int> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  Rng rng(seed);
  rng.shuffle(order.begin(), order.end());
  Adjacency out(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < order.size(); ++i) {
    const int a = order[i], b = order[(i + 1) % order.size()];
    out[static_cast<std::size_t>(a)].push_back(b);
    out[static_cast<std::size_t>(b)].push_back(a);
  }
  return out;
}

using Edge = std::pair<int, int>;  // first < second

Adjacency edge_adjacency(int n, const std::vector<Edge>& list) {
  Adjacency out(static_cast<std::size_t>(n));
  for (const auto& [a, b] : list) {
    out[static_cast<std::size_t>(a)].push_back(b);
    out[static_cast<std::size_t>(b)].push_back(a);
  }
  return out;
}

// The connected k-regular circulant: i ~ i +- 1..k/2, plus the antipode i ~ i + n/2 for odd k.
std::vector<Edge> circulant_edges(int n, int k) {
  std::vector<Edge> edges;
  for (int i = 0; i < n; ++i)
    for (int d = 1; d <= k / 2; ++d) edges.emplace_back(std::min(i, (i + d) % n), std::max(i, (i + d) % n));
  if (k % 2 == 1)
    for (int i = 0; i < n / 2; ++i) edges.emplace_back(i, i + n / 2);
  return edges;
}

// Random k-regular graph: start from a connected k-regular circulant (i ~ i +- 1..k/2,
// plus the antipode i ~ i + n/2 for odd k), then randomise it by degree-preserving
// double-edge swaps that never create a self loop or a multi-edge. Swaps are applied in
// batches; a batch that disconnects the graph is undone and the batch size halved. So
// the construction always succeeds, is connected, and depends only on (n, k, seed).
// (k = 2 is a random Hamiltonian cycle instead.)
Adjacency random_regular(int n, int k, std::uint64_t seed) {
  const std::string what =
      "a random " + std::to_string(k) + "-regular graph on " + std::to_string(n) + " peers";
  if (k < 1) throw TopologyError(what + " is impossible: the degree must be at least 1 (set the degree)");
  if (k >= n) throw TopologyError(what + " is impossible: the degree must be below the number of peers");
  if ((static_cast<long long>(n) * k) % 2 != 0)
    throw TopologyError(what + " is impossible: degree x peers must be even");
  if (k == 1 && n > 2)
    throw TopologyError(what + " is never connected (it is a set of disjoint pairs); use degree 2 or more");

  if (k == 2) return random_cycle(n, seed);

  const auto key = [n](int a, int b) {
    return static_cast<std::uint64_t>(std::min(a, b)) * static_cast<std::uint64_t>(n) + std::max(a, b);
  };
  std::vector<Edge> edges = circulant_edges(n, k);
  std::unordered_set<std::uint64_t> present;
  for (const auto& [a, b] : edges) present.insert(key(a, b));
  const auto to_adjacency = [n](const std::vector<Edge>& list) { return edge_adjacency(n, list); };

  Rng rng(seed);
  const std::size_t m = edges.size();
  const std::size_t target_swaps = 10 * m;
  const std::size_t max_attempts = 100 * m + 1000;  // the complete graph admits no swap at all
  std::size_t done = 0, attempts = 0, batch = std::max<std::size_t>(1, m / 4);
  while (m >= 2 && done < target_swaps && attempts < max_attempts) {
    const std::vector<Edge> saved_edges = edges;
    const std::unordered_set<std::uint64_t> saved_present = present;
    std::size_t applied = 0;
    while (applied < batch && attempts < max_attempts) {
      ++attempts;
      const std::size_t e1 = rng.below(m), e2 = rng.below(m);
      if (e1 == e2) continue;
      auto [a, b] = edges[e1];
      auto [c, d] = edges[e2];
      if (rng.below(2) == 1) std::swap(c, d);
      // (a, b), (c, d) -> (a, d), (c, b)
      if (a == d || c == b || present.count(key(a, d)) || present.count(key(c, b))) continue;
      present.erase(key(a, b));
      present.erase(key(c, d));
      present.insert(key(a, d));
      present.insert(key(c, b));
      edges[e1] = {std::min(a, d), std::max(a, d)};
      edges[e2] = {std::min(c, b), std::max(c, b)};
      ++applied;
    }
    if (connectivity_problem(to_adjacency(edges), false).empty()) {
      done += applied;
      batch = std::min(batch * 2, std::max<std::size_t>(1, m / 4));
    } else {
      edges = saved_edges;
      present = saved_present;
      batch = std::max<std::size_t>(1, batch / 2);
    }
  }
  return to_adjacency(edges);
}

std::string_view trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t\r");
  return s.substr(first, last - first + 1);
}

// Edge list: "a b" per line, '#' starts a comment. Peers: `peers`, or 1 + the largest
// rank when peers == 0.
Adjacency read_edge_list(const std::filesystem::path& path, int& peers, bool directed) {
  const std::string name = path.string();
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw TopologyFileError(name + ": is a directory, not an edge-list file");
  std::ifstream in(path);
  if (!in)
    throw TopologyFileError(name + ": cannot open the edge-list file: " + std::strerror(errno) +
                            " (check the path and its permissions)");
  const int limit = peers > 0 ? peers : kMaxPeers;
  std::vector<std::pair<int, int>> edges;
  int largest = -1;
  std::string line;
  for (long long line_no = 1; std::getline(in, line); ++line_no) {
    const std::string where = name + ":" + std::to_string(line_no) + ": ";
    std::string_view text(line);
    if (const auto hash = text.find('#'); hash != std::string_view::npos) text = text.substr(0, hash);
    text = trim(text);
    if (text.empty()) continue;
    int ranks[2] = {-1, -1};
    std::size_t pos = 0;
    bool ok = true;
    for (int& r : ranks) {
      while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t')) ++pos;
      const char* begin = text.data() + pos;
      const char* end = text.data() + text.size();
      long long value = -1;
      const auto [ptr, err] = std::from_chars(begin, end, value);
      if (err == std::errc::result_out_of_range)
        value = std::numeric_limits<long long>::max();
      else if (err != std::errc() || (ptr != end && *ptr != ' ' && *ptr != '\t'))
        ok = false;
      if (!ok) break;
      if (value < 0)
        throw TopologyFileError(where + "rank " + std::to_string(value) + " is negative; ranks are 0-based");
      if (value >= limit)
        throw TopologyFileError(where + "rank " + std::string(begin, ptr) + " is out of range: " +
                                (peers > 0 ? "the graph has " + std::to_string(peers) + " peers (ranks 0.." +
                                                 std::to_string(peers - 1) + ")"
                                           : "ranks go up to " + std::to_string(kMaxPeers - 1)));
      r = static_cast<int>(value);
      pos = static_cast<std::size_t>(ptr - text.data());
    }
    if (ok && trim(text.substr(std::min(pos, text.size()))).size() != 0) ok = false;
    if (!ok)
      throw TopologyFileError(where + "expected an edge as two ranks 'a b' (non-negative integers), got '" +
                              std::string(text) + "'");
    if (ranks[0] == ranks[1])
      throw TopologyFileError(
          where + "self loop " + std::to_string(ranks[0]) + " " + std::to_string(ranks[1]) +
          ": every peer always keeps its own share, so list only edges between two peers");
    largest = std::max({largest, ranks[0], ranks[1]});
    edges.emplace_back(ranks[0], ranks[1]);
  }
  if (in.bad())
    throw TopologyFileError(name + ": reading the edge-list file failed: " + std::strerror(errno));
  if (peers == 0) {
    if (largest < 0)
      throw TopologyFileError(name + ": no edges (write one edge per line as two 0-based ranks, e.g. '0 1')");
    peers = largest + 1;
  }
  Adjacency out(static_cast<std::size_t>(peers));
  for (const auto& [a, b] : edges) {
    out[static_cast<std::size_t>(a)].push_back(b);
    if (!directed) out[static_cast<std::size_t>(b)].push_back(a);
  }
  return out;
}

}  // namespace

std::string_view to_string(GraphKind kind) {
  switch (kind) {
    case GraphKind::ring:
      return "ring";
    case GraphKind::torus:
      return "torus";
    case GraphKind::exp:
      return "exp";
    case GraphKind::onepeer_exp:
      return "onepeer-exp";
    case GraphKind::complete:
      return "complete";
    case GraphKind::random_regular:
      return "random-regular";
    case GraphKind::file:
      return "file";
  }
  return "?";
}

GraphKind parse_graph_kind(std::string_view name) {
  for (GraphKind k : {GraphKind::ring, GraphKind::torus, GraphKind::exp, GraphKind::onepeer_exp,
                      GraphKind::complete, GraphKind::random_regular, GraphKind::file})
    if (name == to_string(k)) return k;
  if (name == "exponential") return GraphKind::exp;
  if (name == "one-peer-exp") return GraphKind::onepeer_exp;
  throw TopologyError("unknown graph '" + std::string(name) +
                      "' (known: ring, torus, exp, onepeer-exp, complete, random-regular, file)");
}

Topology Topology::make(const GraphSpec& spec) {
  Topology t;
  t.spec_ = spec;
  GraphSpec& s = t.spec_;
  if (s.kind != GraphKind::file && (s.peers < 1 || s.peers > kMaxPeers))
    throw TopologyError(std::string(to_string(s.kind)) + " graph: the number of peers must be 1.." +
                        std::to_string(kMaxPeers) + ", not " + std::to_string(s.peers));
  if (s.kind == GraphKind::file && (s.peers < 0 || s.peers > kMaxPeers))
    throw TopologyError("file graph: the number of peers must be 1.." + std::to_string(kMaxPeers) +
                        " (or 0 to take it from the file), not " + std::to_string(s.peers));
  if (s.kind == GraphKind::exp || s.kind == GraphKind::onepeer_exp) s.directed = true;
  if (s.kind == GraphKind::complete || s.kind == GraphKind::random_regular) s.directed = false;

  std::vector<Adjacency> outs;
  switch (s.kind) {
    case GraphKind::ring:
      outs.push_back(ring(s.peers, s.directed));
      break;
    case GraphKind::torus:
      s.torus_rows = torus_rows(s.peers, s.torus_rows);
      outs.push_back(torus(s.torus_rows, s.peers / s.torus_rows, s.directed));
      break;
    case GraphKind::exp:
      outs.push_back(exponential(s.peers));
      break;
    case GraphKind::onepeer_exp: {
      const int tau = std::max(1, ceil_log2(s.peers));
      for (int r = 0; r < tau; ++r) {
        Adjacency out(static_cast<std::size_t>(s.peers));
        for (int i = 0; i < s.peers; ++i)
          out[static_cast<std::size_t>(i)].push_back(static_cast<int>((i + (1LL << r)) % s.peers));
        outs.push_back(std::move(out));
      }
      break;
    }
    case GraphKind::complete:
      outs.push_back(complete(s.peers));
      break;
    case GraphKind::random_regular:
      outs.push_back(random_regular(s.peers, s.degree, s.seed));
      break;
    case GraphKind::file:
      if (s.file.empty()) throw TopologyError("file graph: no edge-list file given");
      outs.push_back(read_edge_list(s.file, s.peers, s.directed));
      break;
  }

  Adjacency all(static_cast<std::size_t>(s.peers));  // union over the period, for the connectivity check
  for (Adjacency& out : outs) {
    normalise(out);
    for (std::size_t i = 0; i < out.size(); ++i) all[i].insert(all[i].end(), out[i].begin(), out[i].end());
    Round round;
    round.in = s.directed ? transpose(out) : out;
    round.out = std::move(out);
    t.rounds_.push_back(std::move(round));
  }
  normalise(all);
  if (const std::string problem = connectivity_problem(all, s.directed); !problem.empty()) {
    if (s.kind == GraphKind::file)
      throw TopologyFileError(s.file.string() + ": " + problem +
                              "; every peer must be able to reach every other");
    throw TopologyError(t.describe() + ": " + problem);
  }
  return t;
}

bool Topology::directed() const noexcept { return spec_.directed; }

const std::vector<int>& Topology::out_neighbours(int rank, std::uint64_t round) const {
  if (rank < 0 || rank >= peers() || rounds_.empty())
    throw std::out_of_range("rank " + std::to_string(rank) + " is not in a graph of " +
                            std::to_string(peers()) + " peers");
  return rounds_[round % rounds_.size()].out[static_cast<std::size_t>(rank)];
}

const std::vector<int>& Topology::in_neighbours(int rank, std::uint64_t round) const {
  if (rank < 0 || rank >= peers() || rounds_.empty())
    throw std::out_of_range("rank " + std::to_string(rank) + " is not in a graph of " +
                            std::to_string(peers()) + " peers");
  return rounds_[round % rounds_.size()].in[static_cast<std::size_t>(rank)];
}

std::size_t Topology::edge_count(std::uint64_t round) const {
  if (rounds_.empty()) return 0;
  std::size_t arcs = 0;
  for (const auto& list : rounds_[round % rounds_.size()].out) arcs += list.size();
  return directed() ? arcs : arcs / 2;
}

Topology Topology::undirected() const {
  Topology t = *this;
  if (!directed()) return t;
  t.spec_.directed = false;
  for (Round& r : t.rounds_) {
    for (std::size_t i = 0; i < r.out.size(); ++i) {
      r.out[i].insert(r.out[i].end(), r.in[i].begin(), r.in[i].end());
      std::sort(r.out[i].begin(), r.out[i].end());
      r.out[i].erase(std::unique(r.out[i].begin(), r.out[i].end()), r.out[i].end());
    }
    r.in = r.out;
  }
  return t;
}

std::string Topology::describe() const {
  std::string s(to_string(spec_.kind));
  if (spec_.kind == GraphKind::torus && spec_.torus_rows > 0)
    s += " " + std::to_string(spec_.torus_rows) + "x" + std::to_string(spec_.peers / spec_.torus_rows);
  if (spec_.kind == GraphKind::file) s += " " + spec_.file.string();
  s += ", " + std::to_string(spec_.peers) + (spec_.peers == 1 ? " peer, " : " peers, ");
  s += directed() ? "directed" : "undirected";
  std::size_t lo = 0, hi = 0;
  bool first = true;
  for (const Round& r : rounds_)
    for (const auto& list : r.out) {
      lo = first ? list.size() : std::min(lo, list.size());
      hi = first ? list.size() : std::max(hi, list.size());
      first = false;
    }
  s += ", degree " + (lo == hi ? std::to_string(hi) : std::to_string(lo) + ".." + std::to_string(hi));
  if (spec_.kind == GraphKind::random_regular) s += ", seed " + std::to_string(spec_.seed);
  if (time_varying()) s += ", time-varying with period " + std::to_string(period());
  return s;
}

}  // namespace hearsay::topology
