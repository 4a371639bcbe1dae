// How much one slow peer slows everyone else, per algorithm.
//
// N peers run as threads over the in-process transport. Each "trains" by sleeping for
// its step time -- the stand-in for computation, so that the figure measures waiting for
// communication and not the arithmetic of N peers sharing this machine's cores -- then
// hands its LeNet-sized parameter buffer to a Mixer (communication thread, overlap on)
// after every step. Run 1: all peers take --step-ms per step. Run 2: peer 0 takes
// --slow-factor times longer. Reported: the median steps/s of the other peers in each
// run, and the slowdown 1 - run2/run1. Each pair of runs is repeated --repeats times,
// side by side, and the median slowdown is reported.
#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.hpp"
#include "gossip/mixing/algorithms/algorithm.hpp"
#include "gossip/mixing/algorithms/mixer.hpp"
#include "gossip/mixing/topology/topology.hpp"
#include "gossip/network/transport/allocator_policy.hpp"
#include "gossip/network/transport/inproc_transport.hpp"

using namespace hearsay;
using namespace std::chrono_literals;

namespace {

struct Config {
  int peers = 8;
  double seconds = 3;
  double step_ms = 5;
  double slow_factor = 10;
  double round_timeout_ms = 200;
  int repeats = 3;
  std::size_t params = 129'068;  // LeNet
  std::vector<std::string> algos{"gossip", "sgp", "adpsgd", "dpsgd", "allreduce"};
  std::string graph = "exp";
};

// Runs one configuration; returns the median steps/s of the peers other than peer 0.
double run_once(const Config& c, const std::string& algo, bool slow) {
  auto fabric = transport::InprocFabric::create();
  topology::GraphSpec spec;
  spec.kind = topology::parse_graph_kind(c.graph);
  spec.peers = c.peers;
  const auto graph = topology::Topology::make(spec);
  std::vector<std::string> ids;
  for (int r = 0; r < c.peers; ++r) ids.push_back("peer" + std::to_string(r));
  std::vector<std::unique_ptr<transport::InprocTransport>> endpoints;
  for (int r = 0; r < c.peers; ++r) {
    transport::InprocOptions o;
    o.id = ids[r];
    o.expect = {"bench", "lenet"};
    endpoints.push_back(std::make_unique<transport::InprocTransport>(fabric, o));
  }
  for (auto& e : endpoints)
    for (int r = 0; r < c.peers; ++r)
      if (ids[r] != e->id()) e->connect(ids[r], transport::InprocFabric::address_for(ids[r]));

  std::vector<double> rates(c.peers, 0);
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int r = 0; r < c.peers; ++r) {
    threads.emplace_back([&, r] {
      algorithms::AlgorithmSetup setup;
      setup.name = algo;
      setup.transport = endpoints[r].get();
      setup.peers = {ids, r};
      setup.graph = &graph;
      setup.options.overlap = true;
      setup.options.seed = 17 + r;
      setup.options.round_timeout = std::chrono::duration_cast<transport::Clock::duration>(
          std::chrono::duration<double, std::milli>(c.round_timeout_ms));
      algorithms::Mixer mixer(algorithms::make_algorithm(setup), c.params);
      std::vector<float> params(c.params, static_cast<float>(r));
      const auto step_time =
          std::chrono::duration<double, std::milli>(c.step_ms * (slow && r == 0 ? c.slow_factor : 1.0));
      const auto start = bench::Clock::now();
      std::uint64_t steps = 0;
      while (!stop.load()) {
        std::this_thread::sleep_for(step_time);  // computation stand-in (see the top comment)
        ++steps;
        try {
          mixer.after_step(params, steps);
        } catch (const std::exception& e) {
          // allreduce gives up on a peer that stays silent past the deadline; count
          // the steps so far and keep going like a user restarting would not: stop.
          std::fprintf(stderr, "  %s peer%d: %s\n", algo.c_str(), r, e.what());
          break;
        }
      }
      rates[r] = static_cast<double>(steps) / bench::seconds_since(start);
      try {
        mixer.flush(params);
      } catch (const std::exception&) {
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(c.seconds));
  stop = true;
  for (auto& t : threads) t.join();
  return bench::median(std::vector<double>(rates.begin() + 1, rates.end()));
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App app{"bench_slow_peer: how much one slow peer slows the others, per algorithm"};
  app.add_option("--peers", c.peers, "peers (threads)")->check(CLI::Range(2, 64));
  app.add_option("--seconds", c.seconds, "length of each run")->check(CLI::PositiveNumber);
  app.add_option("--step-ms", c.step_ms, "time of one local step of a normal peer")
      ->check(CLI::PositiveNumber);
  app.add_option("--slow-factor", c.slow_factor, "how many times slower peer 0 is")
      ->check(CLI::Range(1.0, 1000.0));
  app.add_option("--round-timeout-ms", c.round_timeout_ms, "round deadline")->check(CLI::PositiveNumber);
  app.add_option("--repeats", c.repeats, "pairs of runs; the median is reported")->check(CLI::Range(1, 100));
  app.add_option("--algos", c.algos, "algorithms")->delimiter(',');
  app.add_option("--graph", c.graph, "graph of the graph algorithms");
  app.add_option("--params", c.params, "parameters per peer (default: LeNet's)")
      ->check(CLI::Range(1, 100'000'000));
  CLI11_PARSE(app, argc, argv);
  transport::keep_large_allocations_paged_in();  // as the hearsay executable does

  nlohmann::json out = nlohmann::json::object();
  std::fprintf(
      stderr,
      "%d peers, %zu parameters, step %.1f ms, peer 0 %.0fx slower in the second run, %.1f s per run, "
      "%d repeats\n",
      c.peers, c.params, c.step_ms, c.slow_factor, c.seconds, c.repeats);
  std::fprintf(stderr, "%-10s %14s %14s %10s\n", "algorithm", "steps/s equal", "steps/s slow", "slowdown");
  for (const auto& algo : c.algos) {
    std::vector<double> equal, slowed, slowdown;
    for (int i = 0; i < c.repeats; ++i) {
      equal.push_back(run_once(c, algo, false));
      slowed.push_back(run_once(c, algo, true));
      slowdown.push_back(1.0 - slowed.back() / equal.back());
    }
    const double s = bench::median(slowdown);
    std::fprintf(stderr, "%-10s %14.1f %14.1f %9.1f%%\n", algo.c_str(), bench::median(equal),
                 bench::median(slowed), 100 * s);
    out[algo] = {{"steps_per_s_equal", bench::median(equal)},
                 {"steps_per_s_one_slow", bench::median(slowed)},
                 {"slowdown", s},
                 {"slowdowns", slowdown}};
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
