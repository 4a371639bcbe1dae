// What every registered algorithm promises, run over registered_algorithms() in the
// style of gloo's tests: 4, 6 and 8 in-process peers mixing random buffers in virtual
// time (so that a round lasts what the algorithm decided to wait, whatever the load).
// Each algorithm conserves the network's sum where its traits say so, brings its peers
// together on a connected graph, and on a lost peer either trains on or fails naming
// the peer, as its traits say. A new algorithm gets these tests by being registered;
// the one defined below shows it, and runs in `hearsay sim` as well.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/fiber.hpp"
#include "base/log.hpp"
#include "gossip/mixing/algorithms/algorithm.hpp"
#include "gossip/mixing/algorithms/registry.hpp"
#include "graph_algorithm_test_util.hpp"
#include "sim/sim_command.hpp"

using namespace hearsay;
using namespace hearsay::algorithms;
using namespace hearsay::algorithms::testing;
using namespace std::chrono_literals;

namespace {

// A trivial algorithm, defined here and nowhere else: every round each peer sends its
// parameters to the next rank of a ring and averages in the previous rank's, x_i <- (x_i +
// x_{i-1}) / 2, a doubly stochastic mix. A round whose message does not come before the
// round timeout (a dead neighbour) leaves the parameters as they are: it trains on.
class RingAverage final : public Algorithm {
 public:
  RingAverage(transport::Transport& transport, PeerSet peers, AlgorithmOptions options)
      : Algorithm(transport, std::move(peers), options) {}
  std::string_view name() const override { return "ring-average"; }

  RoundResult mix(std::span<float> params, std::uint64_t round) override {
    RoundResult result;
    const int n = peers_.size();
    if (n == 1) return result;
    wire::Header header;
    header.type = wire::MessageType::params_push;
    header.step = round;
    try {
      transport_.send(peers_.id_of((peers_.self + 1) % n), header, transport::Payload::copy_f32(params));
    } catch (const transport::PeerError&) {
      ++result.failed;
    }
    const std::string& previous = peers_.id_of((peers_.self + n - 1) % n);
    const auto deadline = Clock::now() + options_.round_timeout;
    bool broken = false;  // a PeerError of the previous peer: no use waiting
    while (!arrived_.contains(round) && !broken) {
      std::optional<transport::Message> m;
      try {
        m = transport_.receive(deadline);
      } catch (const transport::PeerError& e) {
        broken = e.peer_id() == previous;
        continue;
      }
      if (!m) break;
      // The previous peer can run rounds ahead of us (it waits only for its own previous).
      if (m->type() == wire::MessageType::params_push && m->sender() == previous && m->header().step >= round &&
          m->count() == params.size())
        arrived_[m->header().step] = m->decode();
    }
    const auto it = arrived_.find(round);
    if (it == arrived_.end()) {
      ++result.timed_out;
      return result;
    }
    for (std::size_t i = 0; i < params.size(); ++i) params[i] = 0.5f * (params[i] + it->second[i]);
    arrived_.erase(arrived_.begin(), std::next(it));
    ++result.exchanged;
    return result;
  }

 private:
  std::map<std::uint64_t, std::vector<float>> arrived_;  // the previous peer's parameters by round
};

// Its one registry row: nothing else in hearsay names it.
const AlgorithmTraits& kRingAverage = register_algorithm({
    .name = "ring-average",
    .description = "test: average with the previous rank of a ring",
    .needs_ranks = true,
    .why_ranks = "the ring is ordered by rank",
    .pace = Pace::lockstep,
    .topology = "ring",
    .make = [](const AlgorithmSetup& s) -> std::unique_ptr<Algorithm> {
      return std::make_unique<RingAverage>(*s.transport, s.peers, s.options);
    },
});

constexpr int kRounds = 30;
constexpr std::size_t kSize = 1000;

struct Outcome {
  std::vector<int> rounds_done;     // per peer
  std::vector<std::string> errors;  // per peer: what ended its rounds early ("" for none)
  std::vector<std::string> stuck;   // fibers parked for good
};

// Every peer of `algs` (one fiber each) runs kRounds rounds as a peer's communication
// thread does, 1 ms of training before each (served, when the algorithm serves between
// rounds); then serves until every peer has ended its rounds and no exchange is left
// half done. kill_rank's endpoint dies before its round kill_after.
Outcome run_peers(Network& net, std::vector<std::unique_ptr<Algorithm>>& algs, std::vector<std::vector<float>>& xs,
                  int kill_rank = -1, int kill_after = 0) {
  const int n = static_cast<int>(algs.size());
  Outcome out{std::vector<int>(algs.size(), 0), std::vector<std::string>(algs.size()), {}};
  int ended = 0;
  const int live = n - (kill_rank >= 0 ? 1 : 0);
  const auto train = [&](int r) {
    Algorithm& alg = *algs[static_cast<std::size_t>(r)];
    const auto until = Clock::now() + 1ms;
    if (alg.serves_between_rounds())
      alg.serve(xs[static_cast<std::size_t>(r)], until);
    else
      fiber::sleep_until(until);
  };
  const auto outstanding = [&] {
    std::size_t total = 0;
    for (int r = 0; r < n; ++r)
      if (r != kill_rank) total += algs[static_cast<std::size_t>(r)]->outstanding();
    return total;
  };
  const auto body = [&](int r) {
    const auto i = static_cast<std::size_t>(r);
    try {
      for (int round = 0; round < kRounds; ++round) {
        if (r == kill_rank && round == kill_after) {
          net.fabric->kill(peer_id(r));
          return;
        }
        train(r);
        if (algs[i]->round_needed()) algs[i]->mix(xs[i], static_cast<std::uint64_t>(round));
        ++out.rounds_done[i];
      }
    } catch (const std::exception& e) {
      out.errors[i] = e.what();
    }
    ++ended;
    for (int wait = 0; wait < 10000 && (ended < live || outstanding() > 0); ++wait) train(r);
  };
  std::vector<int> ranks;
  for (int r = 0; r < n; ++r) ranks.push_back(r);
  out.stuck = hearsay::testing::run_each(ranks, true, peer_id, body);
  return out;
}

std::vector<std::unique_ptr<Algorithm>> build(const AlgorithmTraits& traits, Network& net,
                                              const topology::Topology& graph) {
  std::vector<std::unique_ptr<Algorithm>> algs;
  for (int r = 0; r < net.size(); ++r) {
    AlgorithmSetup setup;
    setup.name = std::string(traits.name);
    setup.transport = net.transports[static_cast<std::size_t>(r)].get();
    setup.peers = net.peers(r);
    setup.graph = &graph;
    setup.options.round_timeout = 200ms;
    setup.options.seed = 7;
    algs.push_back(make_algorithm(setup));
  }
  return algs;
}

// A ring over an even number of peers: connected, regular and bipartite, so that every
// algorithm's graph (AD-PSGD's active/passive split included) can be this one.
topology::Topology ring(int n) {
  topology::GraphSpec spec;
  spec.kind = topology::GraphKind::ring;
  spec.peers = n;
  return topology::Topology::make(spec);
}

double sum_of(const std::vector<std::vector<float>>& xs) {
  double s = 0;
  for (const auto& x : xs)
    for (float v : x) s += v;
  return s;
}

}  // namespace

TEST_CASE("conformance: every algorithm conserves the sum it says it does and brings its peers together",
          "[conformance]") {
  logging::CapturedLines quiet(logging::Level::off);
  const int n = GENERATE(4, 6, 8);
  for (const auto& traits : registered_algorithms()) {
    INFO(traits.name << " on " << n << " peers");
    Network net = make_network(n);
    const auto graph = ring(n);
    auto algs = build(traits, net, graph);
    auto xs = random_buffers(n, kSize, 5);
    for (auto& x : xs)
      for (auto& v : x) v += 1;  // a network sum far from 0
    const double sum0 = sum_of(xs), distance0 = consensus_error(xs);
    const Outcome out = run_peers(net, algs, xs);
    CHECK(out.stuck.empty());
    for (int r = 0; r < n; ++r) {
      INFO("peer " << r << ": " << out.errors[static_cast<std::size_t>(r)]);
      CHECK(out.errors[static_cast<std::size_t>(r)].empty());
      CHECK(out.rounds_done[static_cast<std::size_t>(r)] == kRounds);
    }
    const double distance = consensus_error(xs);
    INFO("sum " << sum0 << " -> " << sum_of(xs) << ", consensus distance " << distance0 << " -> " << distance);
    // 30 rounds on a ring of up to 8 shrink the slowest of these mixes (a ring average,
    // |cos(pi/8)|^30 = 0.09) about tenfold; each algorithm's own tests hold it to its rate.
    CHECK(distance < 0.2 * distance0);
    // Float rounding of 30 rounds of averages: a relative 1e-7 per operation, far below
    // this bound, which one lost or doubled exchange (1/n of a buffer) exceeds by far.
    if (traits.conserves_sum) CHECK(std::abs(sum_of(xs) - sum0) <= 1e-5 * std::abs(sum0));
  }
}

TEST_CASE("conformance: on a lost peer every algorithm trains on, or fails naming the peer, as its traits say",
          "[conformance]") {
  logging::CapturedLines quiet(logging::Level::off);
  const int n = GENERATE(4, 8);
  const int dead = 1;
  for (const auto& traits : registered_algorithms()) {
    INFO(traits.name << " on " << n << " peers, " << peer_id(dead) << " killed before its round 5");
    Network net = make_network(n);
    const auto graph = ring(n);
    auto algs = build(traits, net, graph);
    auto xs = random_buffers(n, kSize, 6);
    const Outcome out = run_peers(net, algs, xs, dead, 5);
    CHECK(out.stuck.empty());  // nobody waits for the dead peer for good
    bool named = false;
    for (int r = 0; r < n; ++r) {
      if (r == dead) continue;
      const std::string& error = out.errors[static_cast<std::size_t>(r)];
      INFO("peer " << r << ": " << error);
      if (traits.survives_lost_peer) {
        CHECK(error.empty());
        CHECK(out.rounds_done[static_cast<std::size_t>(r)] == kRounds);
        for (float v : xs[static_cast<std::size_t>(r)]) REQUIRE(std::isfinite(v));
      } else {
        CHECK_FALSE(error.empty());  // no survivor finishes a run that lost a peer
        named = named || error.find(peer_id(dead)) != std::string::npos;
      }
    }
    if (!traits.survives_lost_peer) CHECK(named);
  }
}

TEST_CASE("conformance: an algorithm registered in this binary runs in hearsay sim as the built-in ones do",
          "[conformance][sim]") {
  logging::CapturedLines quiet(logging::Level::warn);
  const auto out = std::filesystem::temp_directory_path() / "hearsay-conformance-sim";
  std::filesystem::remove_all(out);
  CLI::App app;
  sim::SimConfig cfg;
  CLI::App* cmd = sim::add_sim_command(app, cfg);
  std::vector<std::string> args{"sim",      "--engine", "virtual", "--peers",     "4",
                                "--algo",   std::string(kRingAverage.name),      "--model", "mlp",
                                "--data",   "synthetic", "--epochs", "1",        "--step-time",
                                "10ms",     "--out",    out.string()};
  std::reverse(args.begin(), args.end());  // CLI11 takes the arguments last first
  app.parse(args);
  REQUIRE(sim::run_sim(cfg, *cmd) == 0);
  const auto summary = nlohmann::json::parse(std::ifstream(out / "summary.json"));
  REQUIRE(summary["runs"].size() == 1);
  const auto& run = summary["runs"][0];
  CHECK(run["algo"] == "ring-average");
  CHECK(run["status"] == "ok");
  CHECK(run["final_acc_avg_model"].get<double>() > 0.5);  // it trained, and mixed to one model
  std::filesystem::remove_all(out);
}
