// A spanning tree of a graph, for the algorithms that relay sums along one (RelaySGD,
// relaysgd.hpp): every pair of peers is joined by exactly one path, so a sum relayed hop
// by hop, each peer passing on what came from every side but the receiver's, counts every
// peer exactly once.
#pragma once
#include <vector>

#include "gossip/mixing/topology/topology.hpp"

namespace hearsay::topology {

// The tree's neighbours of every rank, sorted; n − 1 edges in all, each an edge of the
// graph in one direction or the other (a tree edge carries messages both ways, so a
// directed graph's edges are taken as undirected), over the union of the rounds of one
// period. Breadth-first from rank 0, neighbours taken in rank order: the tree is as shallow
// as the graph allows from rank 0, and every peer computes the same one from the graph
// alone. (Topology::make guarantees the union is connected.)
using Tree = std::vector<std::vector<int>>;
Tree spanning_tree(const Topology& graph);

// The hops from `from` to every rank of the tree, by rank.
std::vector<int> tree_hops(const Tree& tree, int from);
// The most hops between two ranks of the tree: the rounds a model takes to reach every peer.
int tree_diameter(const Tree& tree);
// Σ_{i,k} d(i, k) over all ordered pairs of ranks, d the hops between them: each edge lies
// on the paths of the s (n − s) pairs it separates, both ways.
double tree_distance_sum(const Tree& tree);

}  // namespace hearsay::topology
