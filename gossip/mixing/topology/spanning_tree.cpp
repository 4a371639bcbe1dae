#include "gossip/mixing/topology/spanning_tree.hpp"

#include <algorithm>
#include <cstddef>
#include <deque>
#include <set>
#include <stdexcept>

namespace hearsay::topology {

Tree spanning_tree(const Topology& graph) {
  const int n = graph.peers();
  std::vector<std::set<int>> adjacent(static_cast<std::size_t>(n));
  for (std::uint64_t round = 0; round < graph.period(); ++round)
    for (int r = 0; r < n; ++r)
      for (const int to : graph.out_neighbours(r, round)) {
        adjacent[static_cast<std::size_t>(r)].insert(to);
        adjacent[static_cast<std::size_t>(to)].insert(r);
      }
  Tree tree(static_cast<std::size_t>(n));
  std::vector<char> seen(static_cast<std::size_t>(n), 0);
  std::deque<int> queue{0};
  seen[0] = 1;
  while (!queue.empty()) {
    const int at = queue.front();
    queue.pop_front();
    for (const int next : adjacent[static_cast<std::size_t>(at)]) {
      if (seen[static_cast<std::size_t>(next)]) continue;
      seen[static_cast<std::size_t>(next)] = 1;
      tree[static_cast<std::size_t>(at)].push_back(next);
      tree[static_cast<std::size_t>(next)].push_back(at);
      queue.push_back(next);
    }
  }
  if (std::find(seen.begin(), seen.end(), 0) != seen.end())
    throw TopologyError("spanning_tree: " + graph.describe() + " is not connected");
  for (auto& neighbours : tree) std::sort(neighbours.begin(), neighbours.end());
  return tree;
}

std::vector<int> tree_hops(const Tree& tree, int from) {
  std::vector<int> hops(tree.size(), -1);
  std::deque<int> queue{from};
  hops[static_cast<std::size_t>(from)] = 0;
  while (!queue.empty()) {
    const int at = queue.front();
    queue.pop_front();
    for (const int next : tree[static_cast<std::size_t>(at)])
      if (hops[static_cast<std::size_t>(next)] < 0) {
        hops[static_cast<std::size_t>(next)] = hops[static_cast<std::size_t>(at)] + 1;
        queue.push_back(next);
      }
  }
  return hops;
}

int tree_diameter(const Tree& tree) {
  if (tree.empty()) return 0;
  // The farthest rank from any rank is an end of a longest path; the farthest from it, the other.
  const std::vector<int> first = tree_hops(tree, 0);
  const int end = static_cast<int>(std::max_element(first.begin(), first.end()) - first.begin());
  const std::vector<int> second = tree_hops(tree, end);
  return *std::max_element(second.begin(), second.end());
}

double tree_distance_sum(const Tree& tree) {
  const std::size_t n = tree.size();
  if (n == 0) return 0;
  // Breadth-first from rank 0; then, leaves first, each rank's subtree size into its parent's.
  std::vector<int> order{0}, parent(n, -1);
  std::vector<char> seen(n, 0);
  seen[0] = 1;
  for (std::size_t at = 0; at < order.size(); ++at)
    for (const int next : tree[static_cast<std::size_t>(order[at])])
      if (!seen[static_cast<std::size_t>(next)]) {
        seen[static_cast<std::size_t>(next)] = 1;
        parent[static_cast<std::size_t>(next)] = order[at];
        order.push_back(next);
      }
  std::vector<double> size(n, 1.0);
  double sum = 0;
  for (std::size_t at = order.size(); at-- > 1;) {
    const auto v = static_cast<std::size_t>(order[at]);
    sum += 2 * size[v] * (static_cast<double>(n) - size[v]);
    size[static_cast<std::size_t>(parent[v])] += size[v];
  }
  return sum;
}

}  // namespace hearsay::topology
