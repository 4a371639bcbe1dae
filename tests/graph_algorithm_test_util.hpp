// Helpers of the graph algorithm tests (test_dpsgd, test_sgp, test_local): n
// in-process peers that all know each other, random parameter buffers, consensus
// measures, and a runner that drives one thread (or one fiber, in virtual time) per peer,
// each calling mix() on its own buffer round after round, as the communication thread of
// a peer would.
#pragma once
#include <algorithm>
#include <cmath>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "base/fiber.hpp"
#include "base/rng.hpp"
#include "gossip/mixing/algorithms/algorithm.hpp"
#include "gossip/mixing/topology/topology.hpp"
#include "gossip/network/emulation/emulated_transport.hpp"
#include "gossip/network/emulation/link_spec.hpp"
#include "gossip/network/transport/inproc_transport.hpp"
#include "virtual_time_test_util.hpp"

namespace hearsay::algorithms::testing {

inline std::string peer_id(int rank) { return "p" + std::to_string(rank); }

// Peers "p0".."p<n-1>", seen from self.
inline PeerSet peer_set(int n, int self) {
  PeerSet p;
  for (int r = 0; r < n; ++r) p.ids.push_back(peer_id(r));
  p.self = self;
  return p;
}

struct Network {
  std::shared_ptr<transport::InprocFabric> fabric;
  std::vector<std::unique_ptr<transport::InprocTransport>> transports;

  int size() const { return static_cast<int>(transports.size()); }
  PeerSet peers(int self) const { return peer_set(size(), self); }
};

// n peers "p0".."p<n-1>" on one fabric, each connected to every other.
inline Network make_network(int n) {
  Network net;
  net.fabric = transport::InprocFabric::create();
  for (int r = 0; r < n; ++r) {
    transport::InprocOptions o;
    o.id = peer_id(r);
    o.expect = {"run-graph", "model-graph"};
    net.transports.push_back(std::make_unique<transport::InprocTransport>(net.fabric, o));
  }
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b)
      if (a != b) net.transports[a]->connect(peer_id(b), transport::InprocFabric::address_for(peer_id(b)));
  return net;
}

// n peers "p0".."p<n-1>" whose sends all go through an emulated link `link` (as
// --link spells it, "unlimited,0s,loss=0.2,reorder=0.2"), seeded seed + rank, each
// connected to every other. set_own_link on each heals them.
inline std::vector<std::unique_ptr<transport::Transport>> emulated_network(int n, const std::string& link,
                                                                           std::uint64_t seed) {
  auto fabric = transport::InprocFabric::create();
  std::vector<std::unique_ptr<transport::Transport>> transports;
  for (int r = 0; r < n; ++r) {
    transport::InprocOptions o;
    o.id = peer_id(r);
    o.expect = {"run-graph", "model-graph"};
    emulation::EmulationOptions e;
    e.links.self = emulation::parse_link_spec(link);
    e.links.seed = seed + static_cast<std::uint64_t>(r);
    e.links_may_change = true;
    transports.push_back(std::make_unique<emulation::EmulatedTransport>(
        std::make_unique<transport::InprocTransport>(fabric, o), e));
  }
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b)
      if (a != b) transports[a]->connect(peer_id(b), transport::InprocFabric::address_for(peer_id(b)));
  return transports;
}

// The graph of `kind` over n peers, with its defaults otherwise.
inline topology::Topology graph_of(topology::GraphKind kind, int n) {
  topology::GraphSpec s;
  s.kind = kind;
  s.peers = n;
  return topology::Topology::make(s);
}

// One algorithm per transport (rank r on transports[r]), built as Alg(transport, peers,
// options, graph).
template <class Alg, class T>
std::vector<std::unique_ptr<Alg>> make_algorithms(const std::vector<std::unique_ptr<T>>& transports,
                                                  const AlgorithmOptions& options,
                                                  const topology::Topology& graph) {
  const int n = static_cast<int>(transports.size());
  std::vector<std::unique_ptr<Alg>> algs;
  for (int r = 0; r < n; ++r)
    algs.push_back(std::make_unique<Alg>(*transports[r], peer_set(n, r), options, graph));
  return algs;
}
template <class Alg>
std::vector<std::unique_ptr<Alg>> make_algorithms(Network& net, const AlgorithmOptions& options,
                                                  const topology::Topology& graph) {
  return make_algorithms<Alg>(net.transports, options, graph);
}

template <class Alg>
std::vector<Algorithm*> pointers(const std::vector<std::unique_ptr<Alg>>& algs) {
  std::vector<Algorithm*> out;
  for (const auto& a : algs) out.push_back(a.get());
  return out;
}

// n buffers of `size` N(0, 1) values.
inline std::vector<std::vector<float>> random_buffers(int n, std::size_t size, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<std::vector<float>> xs(static_cast<std::size_t>(n), std::vector<float>(size));
  for (auto& x : xs)
    for (auto& v : x) v = static_cast<float>(rng.normal());
  return xs;
}

// The element-wise mean over peers, in double.
inline std::vector<double> network_mean(const std::vector<std::vector<float>>& xs) {
  std::vector<double> mean(xs.at(0).size(), 0.0);
  for (const auto& x : xs)
    for (std::size_t i = 0; i < x.size(); ++i) mean[i] += x[i];
  for (double& m : mean) m /= static_cast<double>(xs.size());
  return mean;
}

inline double norm(std::span<const double> v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}

// ||X - 1 mean^T||_F: how far the peers are from agreeing.
inline double consensus_error(const std::vector<std::vector<float>>& xs) {
  const auto mean = network_mean(xs);
  double s = 0;
  for (const auto& x : xs)
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double d = x[i] - mean[i];
      s += d * d;
    }
  return std::sqrt(s);
}

// Largest |x_i[e] - target[e]| over peers and elements.
inline double max_abs_error(const std::vector<std::vector<float>>& xs, std::span<const double> target) {
  double worst = 0;
  for (const auto& x : xs)
    for (std::size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - target[i]));
  return worst;
}

inline double max_abs(const std::vector<std::vector<float>>& xs) {
  double m = 0;
  for (const auto& x : xs)
    for (float v : x) m = std::max(m, static_cast<double>(std::abs(v)));
  return m;
}

struct Schedule {
  std::uint64_t first = 0;  // first round
  std::uint64_t count = 1;  // rounds
  // Added to the rounds of each rank (missing entries: 0): peers of a run count their own
  // rounds, which drift apart.
  std::vector<std::uint64_t> round_offset;
  // Run by each peer's own thread after each of its rounds; must touch only that
  // peer's slots (no Catch assertions: Catch2 is not thread-safe).
  std::function<void(int rank, std::uint64_t round, std::span<const float> buffer)> after_mix;
  // When set, peers wait for each other after every round and this runs (on one of
  // their threads, noexcept) while none of them mixes. Without it peers run freely.
  std::function<void(std::uint64_t round)> between_rounds;
  // Each peer a fiber of one fiber::Scheduler instead of a thread: time is virtual, so a
  // round lasts exactly as long as the algorithm decided to wait, whatever the machine's
  // load. Needs between_rounds, or a peer whose rounds wait for nothing would run all its
  // rounds before the others start.
  bool virtual_time = false;
};

struct RunResult {
  std::vector<std::vector<RoundResult>> results;  // [rank][round - first]
  std::vector<std::vector<double>> seconds;       // how long each mix() took
};

// Runs the schedule on every peer whose algorithm is not null, one thread per peer.
// The first exception of any thread is rethrown here after all threads ended.
inline RunResult run_rounds(const std::vector<Algorithm*>& algs, std::vector<std::vector<float>>& buffers,
                            const Schedule& schedule) {
  const int n = static_cast<int>(algs.size());
  RunResult run;
  run.results.resize(algs.size());
  run.seconds.resize(algs.size());
  int running = 0;
  for (auto* a : algs) running += a != nullptr;
  auto completion = [&schedule, round = schedule.first]() mutable noexcept {
    if (schedule.between_rounds) schedule.between_rounds(round);
    ++round;
  };
  hearsay::testing::FiberBarrier sync(running, completion);
  std::mutex error_mutex;
  std::exception_ptr error;
  const auto peer = [&](int rank) {
    std::uint64_t done = 0;
    try {
      for (; done < schedule.count; ++done) {
        const auto r = static_cast<std::size_t>(rank);
        const std::uint64_t round =
            schedule.first + done + (r < schedule.round_offset.size() ? schedule.round_offset[r] : 0);
        const auto start = transport::Clock::now();
        run.results[rank].push_back(algs[rank]->mix(buffers[rank], round));
        run.seconds[rank].push_back(std::chrono::duration<double>(transport::Clock::now() - start).count());
        if (schedule.after_mix) schedule.after_mix(rank, round, buffers[rank]);
        if (schedule.between_rounds) sync.arrive_and_wait();
      }
    } catch (...) {
      std::lock_guard lock(error_mutex);
      if (!error) error = std::current_exception();
      if (schedule.between_rounds && done < schedule.count) sync.arrive_and_drop();
    }
  };
  if (schedule.virtual_time && !schedule.between_rounds)
    throw std::invalid_argument("run_rounds: virtual time needs between_rounds");
  std::vector<int> ranks;
  for (int rank = 0; rank < n; ++rank)
    if (algs[rank] != nullptr) ranks.push_back(rank);
  const auto stuck = hearsay::testing::run_each(ranks, schedule.virtual_time, peer_id, peer);
  if (!stuck.empty() && !error)
    throw std::runtime_error("run_rounds: " + std::to_string(stuck.size()) + " peers parked for good, the first " +
                             stuck.front());
  if (error) std::rethrow_exception(error);
  return run;
}

// Rounds first .. first + count - 1 with the peers in lockstep, as a synchronous run's
// peers are (a lost message is asked for again at the learnt deadline, or left out).
inline RunResult run_lockstep(const std::vector<Algorithm*>& algs, std::vector<std::vector<float>>& buffers,
                              std::uint64_t first, std::uint64_t count) {
  Schedule schedule;
  schedule.first = first;
  schedule.count = count;
  schedule.between_rounds = [](std::uint64_t) {};
  return run_rounds(algs, buffers, schedule);
}

// Heals every link of emulated_network's transports.
inline void heal_links(std::vector<std::unique_ptr<transport::Transport>>& transports) {
  for (auto& t : transports)
    static_cast<emulation::EmulatedTransport&>(*t).set_own_link(emulation::LinkSpec{});
}

// What `rounds` rounds of mixing did to `buffers`, first moved to an average far from 0
// (+1 each value): how far the network's average moved, relative to it, and the consensus
// error before and after. The buffers are left as mixed.
struct MixEffect {
  double drift = 0, e0 = 0, e = 0;
};
inline MixEffect mix_from_one(const std::vector<Algorithm*>& algs, std::vector<std::vector<float>>& buffers,
                              std::uint64_t rounds) {
  for (auto& b : buffers)
    for (auto& v : b) v += 1;
  const auto mean0 = network_mean(buffers);
  MixEffect m;
  m.e0 = consensus_error(buffers);
  Schedule schedule;
  schedule.count = rounds;
  run_rounds(algs, buffers, schedule);
  std::vector<double> drift = network_mean(buffers);
  for (std::size_t i = 0; i < drift.size(); ++i) drift[i] -= mean0[i];
  m.drift = norm(drift) / norm(mean0);
  m.e = consensus_error(buffers);
  return m;
}

// One peer's rounds as the Mixer runs them: a gradient step on f_i(x) = |x − optimum|² / 2
// (gradient x − optimum), then the round of `inner`. Peers with different optima are the
// heterogeneous data of tracking, D² and RelaySGD's tests, reduced to what they share.
class QuadraticPeer final : public Algorithm {
 public:
  QuadraticPeer(std::unique_ptr<Algorithm> inner, std::vector<float> optimum, float step)
      : Algorithm(inner->transport(), inner->peers(), inner->options()),
        inner_(std::move(inner)),
        optimum_(std::move(optimum)),
        step_(step) {}
  std::string_view name() const override { return inner_->name(); }
  RoundResult mix(std::span<float> params, std::uint64_t round) override {
    for (std::size_t i = 0; i < params.size(); ++i) params[i] -= step_ * (params[i] - optimum_[i]);
    return inner_->mix(params, round);
  }

 private:
  std::unique_ptr<Algorithm> inner_;
  std::vector<float> optimum_;
  float step_;
};

// Peers pulled to different optima (QuadraticPeer, optima N(0, 1)) mixing with Alg over
// `transports` for `rounds` rounds from N(0, 1) values: the largest distance of a peer's
// values from the mean of the optima, the network's optimum. rounds_settled (when given)
// turns false if any round missed a neighbour.
template <class Alg, class Transports>
double distance_from_optimum(Transports& transports, const topology::Topology& graph, int rounds, float step,
                             Clock::duration round_timeout = std::chrono::seconds(60),
                             bool* rounds_settled = nullptr) {
  constexpr std::size_t size = 16;
  const int n = graph.peers();
  AlgorithmOptions options;
  options.round_timeout = round_timeout;  // 60 s: only a hang reaches it
  const auto optima = random_buffers(n, size, 11);
  std::vector<std::unique_ptr<Algorithm>> algs;
  for (int r = 0; r < n; ++r)
    algs.push_back(std::make_unique<QuadraticPeer>(
        std::make_unique<Alg>(*transports[static_cast<std::size_t>(r)], peer_set(n, r), options, graph),
        optima[static_cast<std::size_t>(r)], step));
  std::vector<Algorithm*> ptrs;
  for (auto& a : algs) ptrs.push_back(a.get());
  auto buffers = random_buffers(n, size, 5);
  // In virtual time: a round waits exactly what the algorithm decides, whatever the load.
  Schedule schedule;
  schedule.count = static_cast<std::uint64_t>(rounds);
  schedule.between_rounds = [](std::uint64_t) {};
  schedule.virtual_time = true;
  const auto result = run_rounds(ptrs, buffers, schedule);
  if (rounds_settled)
    for (const auto& peer : result.results)
      for (const RoundResult& r : peer) *rounds_settled = *rounds_settled && r.timed_out + r.failed == 0;
  return max_abs_error(buffers, network_mean(optima));
}

}  // namespace hearsay::algorithms::testing
