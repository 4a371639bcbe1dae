// `hearsay topology` as a user runs it: the real binary as a subprocess, its table and
// JSON against closed forms, the Graphviz file, and the exit codes of bad input.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numbers>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gossip/network/wire/header.hpp"
#include "model/zoo.hpp"
#include "test_support.hpp"

using namespace hearsay::testing;

namespace {

namespace fs = std::filesystem;

nlohmann::json run_json(std::vector<std::string> args) {
  args.insert(args.begin(), "topology");
  args.push_back("--json");
  const CliResult r = run_hearsay(args);
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  REQUIRE(r.status == 0);
  return nlohmann::json::parse(r.out);
}

// The number after `label` at the start of a table line ("  lambda2   0.949253022 (...)").
double table_value(const std::string& out, const std::string& label) {
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    const auto at = line.find_first_not_of(' ');
    if (at == std::string::npos || line.compare(at, label.size() + 1, label + " ") != 0) continue;
    return std::strtod(line.c_str() + at + label.size(), nullptr);
  }
  return std::nan("");
}

// The edges of a Graphviz file as "a-b" (undirected, a < b) or "a>b" (directed).
std::set<std::string> dot_edges(const std::string& text) {
  std::set<std::string> edges;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    int a = 0, b = 0;
    char arrow[3] = {};
    if (std::sscanf(line.c_str(), " %d %2[-<>] %d", &a, arrow, &b) != 3) continue;
    if (std::string(arrow) == "--")
      edges.insert(std::to_string(std::min(a, b)) + "-" + std::to_string(std::max(a, b)));
    else
      edges.insert(std::to_string(a) + ">" + std::to_string(b));
  }
  return edges;
}

std::vector<fs::path> entries_of(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename());
  return out;
}

}  // namespace

TEST_CASE("topology: ring lambda2 in the table and the JSON matches (1 + 2 cos(2 pi / n)) / 3",
          "[topology][cli][process]") {
  for (int n : {5, 8, 16}) {
    const double expected = (1.0 + 2.0 * std::cos(2.0 * std::numbers::pi / n)) / 3.0;
    const CliResult table = run_hearsay({"topology", "--graph", "ring", "--peers", std::to_string(n)});
    INFO("n " << n << "\nstdout:\n" << table.out << "stderr:\n" << table.err);
    REQUIRE(table.status == 0);
    CHECK(contains(table.out, "ring, " + std::to_string(n) + " peers"));
    CHECK(table_value(table.out, "lambda2") == Approx(expected).margin(1e-9));  // printed with 9 decimals
    CHECK(table_value(table.out, "spectral gap") == Approx(1 - expected).margin(1e-9));

    const nlohmann::json j = run_json({"--graph", "ring", "--peers", std::to_string(n)});
    CHECK(j.at("lambda2").get<double>() == Approx(expected).margin(1e-12));
    CHECK(j.at("spectral_gap").get<double>() == Approx(1 - expected).margin(1e-12));
    CHECK(j.at("max_degree") == 2);
    CHECK(j.at("peers") == n);
    CHECK(j.at("directed") == false);
    CHECK(j.at("doubly_stochastic") == true);
    // The lowest eigenvalue is (1 + 2 cos(2 pi k / n)) / 3 nearest k = n / 2: CHOCO's
    // look-ahead is 1 over 1 minus it (¾ for an even ring).
    const double lowest = (1.0 + 2.0 * std::cos(2.0 * std::numbers::pi * (n / 2) / n)) / 3.0;
    CHECK(j.at("reach").get<double>() == Approx(1 - lowest).margin(1e-12));
    CHECK(j.at("lookahead").get<double>() == Approx(1 / (1 - lowest)).margin(1e-12));
    CHECK(table_value(table.out, "reach") == Approx(1 - lowest).margin(1e-6));
    const double rounds = j.at("rounds_to_1000x").get<double>();
    CHECK(std::pow(expected, rounds) <= 1e-3);
    CHECK(std::pow(expected, rounds - 1) > 1e-3);
  }
}

TEST_CASE("topology: exponential graphs against their closed forms", "[topology][cli][process]") {
  for (int n : {8, 16, 32}) {
    const nlohmann::json j = run_json({"--graph", "exp", "--peers", std::to_string(n)});
    INFO(j.dump());
    CHECK(j.at("spectral_gap").get<double>() == Approx(2.0 / (1.0 + std::log2(n))).margin(1e-12));
    CHECK(j.at("directed") == true);
    CHECK(j.at("max_degree") == static_cast<int>(std::log2(n)));
  }
  const CliResult exp16 = run_hearsay({"topology", "--graph", "exp", "--peers", "16"});
  INFO(exp16.all());
  CHECK(table_value(exp16.out, "spectral gap") == Approx(0.4).margin(1e-9));

  const nlohmann::json one = run_json({"--graph", "onepeer-exp", "--peers", "16"});
  CHECK(one.at("lambda2").get<double>() == 0.0);
  CHECK(one.at("rounds_to_1000x") == 4);  // log2(16) rounds to the exact average
  CHECK(one.at("period") == 4);
  CHECK(one.at("max_degree") == 1);
  CHECK(one.at("lookahead").is_null());  // CHOCO refuses a time-varying graph
  CHECK_FALSE(contains(run_hearsay({"topology", "--graph", "onepeer-exp", "--peers", "16"}).out, "reach"));

  const nlohmann::json complete = run_json({"--graph", "complete", "--peers", "6"});
  CHECK(complete.at("lambda2").get<double>() == 0.0);
  CHECK(complete.at("rounds_to_1000x") == 1);
  CHECK(complete.at("lookahead").get<double>() == Approx(1.0).margin(1e-12));  // every other eigenvalue is 0
}

TEST_CASE("topology: bytes per round are out-degree x (payload + header)", "[topology][cli][process]") {
  const nlohmann::json j =
      run_json({"--graph", "exp", "--peers", "8", "--params", "1000", "--compress", "f16"});
  INFO(j.dump());
  CHECK(j.at("params") == 1000);
  CHECK(j.at("dtype") == "f16");
  CHECK(j.at("model").is_null());
  CHECK(j.at("payload_bytes") == 2000);
  const auto header = j.at("header_bytes").get<std::uint64_t>();
  CHECK(header > 0);
  CHECK(header < 1000);
  CHECK(j.at("message_bytes") == 2000 + header);
  CHECK(j.at("bytes_per_round_max") == 3 * (2000 + header));  // exp on 8 peers: out-degree 3

  // A compressed difference: top-1% of 1000 values is 10 indices and values after 12 bytes.
  const nlohmann::json topk =
      run_json({"--graph", "exp", "--peers", "8", "--params", "1000", "--compress", "topk:1%"});
  CHECK(topk.at("dtype") == "compressed");
  CHECK(topk.at("compress") == "topk:1%");
  CHECK(topk.at("payload_bytes") == 8 + 4 + 10 * 8);

  for (const char* model : {"lenet", "mlp", "resnet20"}) {
    // A message carries the whole state: resnet20's BatchNorm statistics travel too.
    const auto net = hearsay::make_model(model);
    const auto params = static_cast<std::uint64_t>(net->state_count());
    const nlohmann::json m =
        run_json({"--graph", "ring", "--peers", "4", "--model", model, "--compress", "int8"});
    INFO(m.dump());
    CHECK(m.at("model") == model);
    CHECK(m.at("params") == params);
    CHECK(m.at("payload_bytes") == *hearsay::wire::payload_bytes(hearsay::wire::Dtype::int8, params));
    CHECK(m.at("bytes_per_round_max") == 2 * m.at("message_bytes").get<std::uint64_t>());
    CHECK(m.at("bn_statistics") == static_cast<std::uint64_t>(net->buffer_count()));
  }
  // Without --model or --params: lenet, f32.
  const nlohmann::json d = run_json({"--graph", "ring", "--peers", "4"});
  CHECK(d.at("model") == "lenet");
  CHECK(d.at("payload_bytes") == 4 * hearsay::make_model("lenet")->param_count());
}

TEST_CASE("topology: --dot writes Graphviz with every edge", "[topology][cli][process]") {
  TempPath dir;
  fs::create_directories(dir.path());
  const std::string ring = dir.file("ring.dot");
  const CliResult r = run_hearsay({"topology", "--graph", "ring", "--peers", "6", "--dot", ring});
  INFO(r.all());
  REQUIRE(r.status == 0);
  const std::string text = read_file(ring);
  CHECK(text.rfind("graph ", 0) == 0);
  CHECK(text.back() == '\n');
  CHECK(contains(text, "}\n"));
  CHECK(dot_edges(text) == std::set<std::string>{"0-1", "1-2", "2-3", "3-4", "4-5", "0-5"});

  const std::string exp = dir.file("exp.dot");
  REQUIRE(run_hearsay({"topology", "--graph", "exp", "--peers", "4", "--dot", exp, "--json"}).status == 0);
  const std::string exp_text = read_file(exp);
  CHECK(exp_text.rfind("digraph ", 0) == 0);
  CHECK(dot_edges(exp_text) == std::set<std::string>{"0>1", "0>2", "1>2", "1>3", "2>3", "2>0", "3>0", "3>1"});

  // Overwriting an existing file leaves no temporary file behind.
  REQUIRE(run_hearsay({"topology", "--graph", "ring", "--peers", "3", "--dot", ring}).status == 0);
  CHECK(dot_edges(read_file(ring)) == std::set<std::string>{"0-1", "1-2", "0-2"});
  CHECK(entries_of(dir.path()).size() == 2);
}

TEST_CASE("topology: an edge-list file, and file errors exit 1 naming the file", "[topology][cli][process]") {
  TempPath dir;
  fs::create_directories(dir.path());
  const std::string star = dir.file("star.txt");
  std::ofstream(star) << "# star\n0 1\n0 2\n0 3\n";
  // Metropolis on a star of 4: lambda2 = 1 - 1/4.
  const nlohmann::json j = run_json({"--graph", "file", "--file", star, "--weights", "metropolis"});
  CHECK(j.at("peers") == 4);
  CHECK(j.at("lambda2").get<double>() == Approx(0.75).margin(1e-12));
  CHECK(j.at("max_degree") == 3);

  const std::string bad = dir.file("bad.txt");
  std::ofstream(bad) << "0 1\n1 2\nthree 4\n";
  const std::string dot = dir.file("bad.dot");
  CliResult r = run_hearsay({"topology", "--graph", "file", "--file", bad, "--dot", dot});
  INFO(r.all());
  CHECK(r.status == 1);
  CHECK(contains(r.err, "bad.txt:3:"));
  CHECK_FALSE(fs::exists(dot));  // nothing written for a graph that failed

  r = run_hearsay({"topology", "--graph", "file", "--file", dir.file("missing.txt")});
  CHECK(r.status == 1);
  CHECK(contains(r.err, "missing.txt"));

  std::ofstream(bad) << "0 1\n2 3\n";
  r = run_hearsay({"topology", "--graph", "file", "--file", bad});
  CHECK(r.status == 1);
  CHECK(contains(r.err, "disconnected"));
}

TEST_CASE("topology: --dot that cannot be written exits 1 and leaves nothing behind",
          "[topology][cli][process]") {
  TempPath dir;
  fs::create_directories(dir.path());
  CliResult r =
      run_hearsay({"topology", "--graph", "ring", "--peers", "4", "--dot", dir.file("no/such/dir.dot")});
  INFO(r.all());
  CHECK(r.status == 1);
  CHECK(contains(r.err, "dir.dot"));
  CHECK(entries_of(dir.path()).empty());

  // A directory in the way: the rename fails, the directory and its parent are untouched.
  const std::string taken = dir.file("taken.dot");
  fs::create_directories(fs::path(taken) / "inside");
  r = run_hearsay({"topology", "--graph", "ring", "--peers", "4", "--dot", taken});
  CHECK(r.status == 1);
  CHECK(fs::is_directory(fs::path(taken) / "inside"));
  CHECK(entries_of(dir.path()).size() == 1);
}

TEST_CASE("topology: bad flags exit 2 and say why", "[topology][cli][process]") {
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> message;  // each must appear on stderr
  };
  const std::vector<Case> cases{
      {{"--graph", "hypercube", "--peers", "8"}, {"hypercube", "ring", "onepeer-exp"}},
      {{"--graph", "ring"}, {"--peers"}},
      {{"--peers", "8"}, {"--graph"}},
      {{"--graph", "ring", "--peers", "0"}, {"--peers"}},
      {{"--graph", "torus", "--peers", "7"}, {"7"}},
      {{"--graph", "torus", "--peers", "12", "--rows", "5"}, {"5"}},
      {{"--graph", "random-regular", "--peers", "8"}, {"--degree"}},
      {{"--graph", "random-regular", "--peers", "9", "--degree", "3"}, {"even"}},
      {{"--graph", "ring", "--peers", "8", "--degree", "3"}, {"--degree"}},
      {{"--graph", "ring", "--peers", "8", "--file", "x.txt"}, {"--file"}},
      {{"--graph", "file"}, {"--file"}},
      {{"--graph", "complete", "--peers", "4", "--directed"}, {"--directed"}},
      {{"--graph", "ring", "--peers", "8", "--weights", "max"}, {"--weights"}},
      {{"--graph", "ring", "--peers", "8", "--compress", "f8"}, {"--compress"}},
      {{"--graph", "ring", "--peers", "8", "--model", "resnet"}, {"resnet"}},
      {{"--graph", "ring", "--peers", "8", "--model", "mlp", "--params", "10"}, {"--model", "--params"}},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args{"topology"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const CliResult r = run_hearsay(args);
    std::string joined;
    for (const auto& a : c.args) joined += a + " ";
    INFO("args: " << joined << "\nstdout:\n" << r.out << "stderr:\n" << r.err);
    CHECK(r.status == 2);
    CHECK(r.out.empty());
    for (const auto& m : c.message) CHECK(contains(r.err, m));
  }
}

TEST_CASE("topology: --help lists every flag", "[topology][cli][process]") {
  const CliResult r = run_hearsay({"topology", "--help"});
  INFO(r.all());
  CHECK(r.status == 0);
  for (const char* flag : {"--graph", "--peers", "--directed", "--weights", "--degree", "--seed", "--rows",
                           "--file", "--model", "--params", "--compress", "--dot", "--json"})
    CHECK(contains(r.all(), flag));
  CHECK(contains(run_hearsay({"--help"}).all(), "topology"));
}
