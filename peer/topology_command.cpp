#include "peer/topology_command.hpp"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string_view>

#include "base/atomic_file.hpp"
#include "gossip/mixing/algorithms/choco.hpp"
#include "gossip/mixing/compress/compressor.hpp"
#include "gossip/mixing/topology/topology.hpp"
#include "gossip/network/wire/header.hpp"
#include "model/zoo.hpp"
#include "peer/graph_flags.hpp"

namespace hearsay {

namespace {

namespace fs = std::filesystem;

// A flag combination that is not a valid request: exit code 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// A file that cannot be read or written: exit code 1.
class FileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

wire::Dtype parse_dtype(std::string_view name) {
  if (const auto d = wire::parse_value_dtype(name)) return *d;
  if (compress::is_difference_compressor(name)) return wire::Dtype::compressed;
  if (compress::low_rank(name) || compress::power_gossip(name))
    throw UsageError("--compress " + std::string(name) +
                     " projects each tensor at low rank, so its messages' size depends on the model's "
                     "layers, which hearsay topology does not know: use f32, f16, bf16, int8, topk:P%, "
                     "randk:P%, sign or int4 here, and read a run's bytes in its metrics");
  throw UsageError(compress::check_compressor_spec(name).value_or("--compress '" + std::string(name) + "'"));
}

// What one parameter message costs on the wire.
struct MessageSize {
  std::string model;          // empty for --params
  std::uint64_t params = 0;   // floats a message carries: parameters and buffers
  std::uint64_t buffers = 0;  // of which BatchNorm statistics (mixed by default, --bn-stats)
  wire::Dtype dtype = wire::Dtype::f32;
  std::string compress = "f32";  // as --compress says it
  std::uint64_t payload = 0;  // frame 2
  std::uint64_t header = 0;   // frame 1
  std::uint64_t total() const { return payload + header; }
};

// The header is a params_push header as the algorithms send it, encoded for real: this
// model's fingerprint, a 16-character run id, the widest sender id of the run ("rank-N")
// and 64-bit step and checksum values. ZeroMQ's frame lengths and CurveZMQ's per-frame
// MAC (a few dozen bytes) are not counted.
MessageSize message_size(const TopologyOptions& o, int peers) {
  MessageSize m;
  std::string fingerprint;
  if (o.params_given) {
    m.params = o.params;
    fingerprint = "model-" + std::to_string(o.params) + "-0123456789abcdef";
  } else {
    m.model = o.model.empty() ? "lenet" : o.model;
    const auto model = make_model(m.model);
    m.params = static_cast<std::uint64_t>(model->state_count());  // what --bn-stats mix sends
    m.buffers = static_cast<std::uint64_t>(model->buffer_count());
    fingerprint = model->fingerprint();
  }
  m.dtype = parse_dtype(o.compress);
  m.compress = o.compress;
  // A compressed difference (CHOCO): the steady round's message; the first round sends the
  // public copy whole, as f32.
  const auto payload =
      m.dtype == wire::Dtype::compressed && m.params <= wire::kMaxElements
          ? std::optional<std::uint64_t>(compress::make_compressor(o.compress, m.params)->payload_bytes())
          : wire::payload_bytes(m.dtype, m.params);
  if (!payload)
    throw UsageError("--params " + std::to_string(m.params) + " is more than one message may carry (" +
                     std::to_string(wire::kMaxElements) + " elements)");
  m.payload = *payload;
  wire::Header h;
  h.run_id = std::string(16, 'r');
  h.fingerprint = fingerprint;
  h.sender = "rank-" + std::to_string(peers > 0 ? peers - 1 : 0);
  h.type = wire::MessageType::params_push;
  h.step = 0xFFFF'FFFF'FFFF'FFFFull;
  h.dtype = m.dtype;
  h.count = m.params;
  h.checksum = 0xFFFF'FFFF'FFFF'FFFFull;
  if (m.dtype == wire::Dtype::compressed) h.base = 0xFFFF'FFFF'FFFF'FFFFull;
  m.header = wire::encode_header(h).size();
  return m;
}

topology::GraphSpec graph_spec(const TopologyOptions& o) {
  try {
    return graph_spec_from_flags({o.graph, o.peers, o.directed, o.rows, o.degree, o.seed, o.file},
                                 {.file = "--file", .peers = "--peers"});
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

// Graphviz text: "graph" with "--" edges when undirected, "digraph" with "->" otherwise;
// a time-varying graph lists every round's edges labelled with the round.
std::string to_dot(const topology::Topology& g) {
  const bool directed = g.directed();
  std::string s = std::string(directed ? "digraph" : "graph") + " \"" +
                  std::string(topology::to_string(g.spec().kind)) + "\" {\n";
  // A JSON string literal is a valid DOT one: quotes and backslashes (a file path's) escaped.
  s += "  label=" +
       nlohmann::json(g.describe()).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + ";\n";
  s += "  node [shape=circle];\n";
  for (int i = 0; i < g.peers(); ++i) s += "  " + std::to_string(i) + ";\n";
  for (std::uint64_t r = 0; r < g.period(); ++r)
    for (int i = 0; i < g.peers(); ++i)
      for (int j : g.out_neighbours(i, r)) {
        if (!directed && j < i) continue;  // each undirected edge once
        s += "  " + std::to_string(i) + (directed ? " -> " : " -- ") + std::to_string(j);
        if (g.time_varying()) s += " [label=\"r" + std::to_string(r) + "\"]";
        s += ";\n";
      }
  s += "}\n";
  return s;
}

// Writes text to path so that a reader sees the old file or the whole new one, never a
// part (base/atomic_file.hpp).
void write_atomically(const fs::path& path, const std::string& text) {
  try {
    write_file_atomically(path, text);
  } catch (const AtomicFileError& e) {
    throw FileError("cannot write '" + path.string() + "': " + e.what());
  }
}

std::string with_commas(std::uint64_t v) {
  std::string digits = std::to_string(v), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

void print_table(const topology::Topology& g, const topology::SpectralSummary& s,
                 topology::WeightScheme scheme, const MessageSize& m) {
  const std::uint64_t period = g.period();
  std::printf("hearsay topology: %s\n", g.describe().c_str());
  std::printf("  weights          %s, %s\n", std::string(topology::to_string(scheme)).c_str(),
              s.doubly_stochastic ? "doubly stochastic (mixing keeps the exact average)"
                                  : "row-stochastic only (peers agree, but not on the exact average)");
  std::printf("  degree           max %d, mean %.2f (messages a peer sends per round)\n", s.max_degree,
              s.mean_degree);
  if (g.time_varying()) {
    std::printf(
        "  lambda2          %.9f (second-largest eigenvalue modulus of the product of the %llu rounds'\n"
        "                   mixing matrices, to the power 1/%llu: the mean decay per round)\n",
        s.lambda2, static_cast<unsigned long long>(period), static_cast<unsigned long long>(period));
  } else {
    std::printf("  lambda2          %.9f (second-largest eigenvalue modulus of the mixing matrix)\n",
                s.lambda2);
  }
  std::printf("  spectral gap     %.9f\n", s.spectral_gap);
  if (s.converges)
    std::printf("  rounds to 1000x  %llu (rounds until the consensus error is cut 1000x)\n",
                static_cast<unsigned long long>(s.rounds_to_1000x));
  else
    std::printf("  rounds to 1000x  never (lambda2 = 1: the peers do not reach consensus)\n");
  if (!g.time_varying()) {
    const double reach = topology::mixing_reach(g, scheme);
    // Exact on a circulant W, else Gershgorin's bound (topology.hpp).
    std::printf("  reach            %.6f (largest real part of 1 - eigenvalue%s); CHOCO's look-ahead %.6f\n",
                reach, topology::is_circulant(g, scheme) ? "" : ", at most: Gershgorin's bound",
                algorithms::Choco::lookahead_for(reach));
  }
  const std::string what = m.model.empty() ? "--params" : m.model;
  // A model with BatchNorm sends its running statistics too (--bn-stats mix, the default).
  const std::string count = m.buffers == 0 ? with_commas(m.params) + " parameters"
                                           : with_commas(m.params - m.buffers) + " parameters + " +
                                                 with_commas(m.buffers) + " BatchNorm statistics";
  std::printf(
      "  message          %s bytes: %s, %s as %s = %s payload bytes\n"
      "                   + %s header bytes (the MessagePack frame; ZeroMQ and CurveZMQ framing not "
      "counted)\n",
      with_commas(m.total()).c_str(), what.c_str(), count.c_str(), m.compress.c_str(),
      with_commas(m.payload).c_str(), with_commas(m.header).c_str());
  std::printf(
      "  sent per round   %s bytes by the busiest peer (%d message%s), %s bytes on average\n",
      with_commas(static_cast<std::uint64_t>(s.max_degree) * m.total()).c_str(), s.max_degree,
      s.max_degree == 1 ? "" : "s",
      with_commas(static_cast<std::uint64_t>(s.mean_degree * static_cast<double>(m.total()) + 0.5)).c_str());
}

nlohmann::json to_json(const topology::Topology& g, const topology::SpectralSummary& s,
                       topology::WeightScheme scheme, const MessageSize& m) {
  nlohmann::json j;
  j["graph"] = topology::to_string(g.spec().kind);
  j["description"] = g.describe();
  j["peers"] = g.peers();
  j["directed"] = g.directed();
  j["period"] = g.period();
  j["edges"] = g.edge_count();
  j["weights"] = topology::to_string(scheme);
  j["doubly_stochastic"] = s.doubly_stochastic;
  j["max_degree"] = s.max_degree;
  j["mean_degree"] = s.mean_degree;
  j["lambda2"] = s.lambda2;
  j["spectral_gap"] = s.spectral_gap;
  j["converges"] = s.converges;
  j["rounds_to_1000x"] = s.converges ? nlohmann::json(s.rounds_to_1000x) : nlohmann::json(nullptr);
  // CHOCO refuses time-varying graphs, and the reach is of round 0's W.
  j["reach"] = nullptr;
  j["lookahead"] = nullptr;
  if (!g.time_varying()) {
    const double reach = topology::mixing_reach(g, scheme);
    j["reach"] = reach;
    j["lookahead"] = algorithms::Choco::lookahead_for(reach);
  }
  j["model"] = m.model.empty() ? nlohmann::json(nullptr) : nlohmann::json(m.model);
  j["params"] = m.params;
  j["bn_statistics"] = m.buffers;
  j["dtype"] = wire::to_string(m.dtype);
  j["compress"] = m.compress;
  j["payload_bytes"] = m.payload;
  j["header_bytes"] = m.header;
  j["message_bytes"] = m.total();
  j["bytes_per_round_max"] = static_cast<std::uint64_t>(s.max_degree) * m.total();
  j["bytes_per_round_mean"] = s.mean_degree * static_cast<double>(m.total());
  return j;
}

}  // namespace

CLI::App* add_topology_command(CLI::App& app, TopologyOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "topology",
      "Inspect a communication graph: degree, spectral gap, rounds to consensus, bytes per round");
  cmd->add_option("--graph", o.graph, "ring | torus | exp | onepeer-exp | complete | random-regular | file")
      ->required();
  cmd->add_option(
         "--peers", o.peers,
         "Number of peers (for --graph file: optional, else 1 + the largest rank); the analysis is O(n^3): "
         "seconds at 1024, about a minute at 4096")
      ->check(CLI::Range(1, topology::kMaxPeers));
  cmd->add_flag("--directed", o.directed,
                "Directed graph (ring: i -> i+1, torus: right and down, file: 'a b' means a -> b); "
                "exp and onepeer-exp are always directed");
  cmd->add_option("--weights", o.weights, "Mixing weights")
      ->check(CLI::IsMember({"uniform", "metropolis"}))
      ->capture_default_str();
  cmd->add_option("--degree", o.degree, "Degree K of --graph random-regular")
      ->check(CLI::Range(1, topology::kMaxPeers));
  cmd->add_option("--seed", o.seed, "Seed of --graph random-regular")->capture_default_str();
  cmd->add_option("--rows", o.rows, "Rows of --graph torus (default: the most square factorisation)")
      ->check(CLI::Range(1, topology::kMaxPeers));
  cmd->add_option("--file", o.file,
                  "Edge list for --graph file: 'a b' per line, 0-based ranks, '#' comments");
  CLI::Option* model =
      cmd->add_option("--model", o.model, "Model whose parameters a message carries (default lenet)")
          ->check(CLI::IsMember(model_names()));
  CLI::Option* params = cmd->add_option_function<std::uint64_t>(
                               "--params",
                               [&o](const std::uint64_t& count) {
                                 o.params = count;
                                 o.params_given = true;
                               },
                               "Parameter count a message carries, instead of --model")
                            ->check(CLI::Range(std::uint64_t{0}, wire::kMaxElements));
  model->excludes(params);
  cmd->add_option("--compress", o.compress,
                  "What a message carries: the values as f32, f16, bf16 or int8, or dpsgd's compressed "
                  "differences topk:P%, randk:P%, sign, int4 (a steady round's message)")
      ->capture_default_str();
  cmd->add_option("--dot", o.dot, "Also write the graph as Graphviz to this file");
  cmd->add_flag("--json", o.json, "Print one JSON object instead of the table");
  cmd->footer(
      "Examples:\n"
      "  hearsay topology --graph exp --peers 16 --model lenet\n"
      "  hearsay topology --graph torus --peers 12 --rows 3 --dot torus.dot\n"
      "  hearsay topology --graph random-regular --peers 32 --degree 4 --json");
  return cmd;
}

int run_topology(const TopologyOptions& o) {
  try {
    const topology::GraphSpec spec = graph_spec(o);
    const topology::WeightScheme scheme = topology::parse_weight_scheme(o.weights);
    const topology::Topology g = topology::Topology::make(spec);
    const MessageSize message = message_size(o, g.peers());
    const topology::SpectralSummary summary = topology::analyse(g, scheme);
    if (!o.dot.empty()) write_atomically(o.dot, to_dot(g));
    if (o.json) {
      // A file path need not be UTF-8; replace what JSON cannot carry rather than fail.
      const auto text =
          to_json(g, summary, scheme, message).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      std::printf("%s\n", text.c_str());
    } else {
      print_table(g, summary, scheme, message);
    }
    return 0;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "hearsay topology: %s\n", e.what());
    return 2;
  } catch (const topology::TopologyFileError& e) {
    std::fprintf(stderr, "hearsay topology: %s\n", e.what());
    return 1;
  } catch (const topology::TopologyError& e) {
    // The flags describe a graph that cannot exist (a torus that does not factor, ...).
    std::fprintf(stderr, "hearsay topology: %s\n", e.what());
    return 2;
  } catch (const FileError& e) {
    std::fprintf(stderr, "hearsay topology: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hearsay topology: %s\n", e.what());
    return 1;
  }
}

}  // namespace hearsay
