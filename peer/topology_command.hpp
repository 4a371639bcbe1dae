// `hearsay topology`: inspect a communication graph before running on it: degrees,
// second-largest eigenvalue of the mixing matrix, spectral gap, rounds to consensus and
// the bytes a peer sends per round for a given model; optionally a Graphviz file.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace hearsay {

struct TopologyOptions {
  std::string graph;  // ring, torus, exp, onepeer-exp, complete, random-regular, file
  int peers = 0;      // 0: not given (a file graph takes it from the file)
  bool directed = false;
  std::string weights = "uniform";
  int degree = 0;  // random-regular
  std::uint64_t seed = 0;
  int rows = 0;       // torus (0: the most square factorisation)
  std::string file;   // edge list for --graph file
  std::string model;  // empty: lenet unless --params is given
  std::uint64_t params = 0;
  bool params_given = false;
  std::string compress = "f32";
  std::string dot;  // Graphviz output path
  bool json = false;
};

// Registers the subcommand and its flags; the options are filled in when parsed.
CLI::App* add_topology_command(CLI::App& app, TopologyOptions& options);
// Prints the analysis. Returns the process exit code: 0 ok, 1 a file that cannot be read
// or written (edge list, --dot), 2 flags that do not make a valid graph.
int run_topology(const TopologyOptions& options);

}  // namespace hearsay
