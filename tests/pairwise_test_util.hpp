// Helpers of tests/test_pairwise.cpp: a network of in-process peers, random buffers and
// the consensus measures, and a runner with one thread per peer calling mix() on its own
// buffer (no training), then serve() until every request of every peer is settled.
#pragma once
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <exception>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/fiber.hpp"
#include "base/rng.hpp"
#include "gossip/mixing/algorithms/adpsgd.hpp"
#include "gossip/mixing/algorithms/gossip.hpp"
#include "gossip/network/transport/inproc_transport.hpp"
#include "virtual_time_test_util.hpp"

namespace hearsay::algorithms::pairwise_testing {

using hearsay::testing::in_virtual_time;

using namespace std::chrono_literals;

inline constexpr std::size_t kSize = 1000;

inline wire::Expectation expectation() { return {"run-pairwise", "mlp-test"}; }

// n peers "p0".."p{n-1}" on one fabric, each connected to all others.
struct Network {
  std::shared_ptr<transport::InprocFabric> fabric = transport::InprocFabric::create();
  std::vector<std::string> ids;
  std::vector<std::unique_ptr<transport::InprocTransport>> ends;

  explicit Network(int n) {
    for (int r = 0; r < n; ++r) ids.push_back("p" + std::to_string(r));
    for (const auto& id : ids) {
      transport::InprocOptions o;
      o.id = id;
      o.expect = expectation();
      ends.push_back(std::make_unique<transport::InprocTransport>(fabric, o));
    }
    for (auto& end : ends)
      for (const auto& id : ids)
        if (id != end->id()) end->connect(id, transport::InprocFabric::address_for(id));
  }
  PeerSet peers(int rank) const { return PeerSet{ids, rank}; }
  transport::InprocTransport& end(int rank) { return *ends[static_cast<std::size_t>(rank)]; }
};

inline AlgorithmOptions options_with(Clock::duration timeout, int fanout = 1,
                                     wire::Dtype compress = wire::Dtype::f32) {
  AlgorithmOptions o;
  o.round_timeout = timeout;
  o.fanout = fanout;
  o.compress = compress;
  o.seed = 11;
  return o;
}

inline topology::Topology make_graph(topology::GraphKind kind, int peers) {
  topology::GraphSpec spec;
  spec.kind = kind;
  spec.peers = peers;
  return topology::Topology::make(spec);
}

using Buffers = std::vector<std::vector<float>>;

// Values O(1) around 1, so that the network average is far from 0 and its relative drift
// is well defined.
inline Buffers random_buffers(int n, std::size_t size, std::uint64_t seed) {
  Rng rng(seed);
  Buffers buffers(static_cast<std::size_t>(n), std::vector<float>(size));
  for (auto& b : buffers)
    for (auto& x : b) x = static_cast<float>(1.0 + rng.normal());
  return buffers;
}

inline std::vector<int> all_ranks(int n) {
  std::vector<int> ranks(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) ranks[static_cast<std::size_t>(r)] = r;
  return ranks;
}

// The element-wise average of the ranks' buffers, in double.
inline std::vector<double> average(const Buffers& buffers, const std::vector<int>& ranks) {
  std::vector<double> avg(buffers.at(0).size(), 0.0);
  for (const int r : ranks)
    for (std::size_t i = 0; i < avg.size(); ++i) avg[i] += buffers[static_cast<std::size_t>(r)][i];
  for (auto& a : avg) a /= static_cast<double>(ranks.size());
  return avg;
}

// ||after - before|| / ||before||.
inline double relative_drift(const std::vector<double>& before, const std::vector<double>& after) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < before.size(); ++i) {
    diff += (after[i] - before[i]) * (after[i] - before[i]);
    norm += before[i] * before[i];
  }
  return std::sqrt(diff / norm);
}

// sqrt(mean over the ranks of ||x_i - avg||^2).
inline double consensus_distance(const Buffers& buffers, const std::vector<int>& ranks) {
  const auto avg = average(buffers, ranks);
  double sum = 0;
  for (const int r : ranks)
    for (std::size_t i = 0; i < avg.size(); ++i) {
      const double d = buffers[static_cast<std::size_t>(r)][i] - avg[i];
      sum += d * d;
    }
  return std::sqrt(sum / static_cast<double>(ranks.size()));
}

// One peer of a run: its algorithm and how to read its exchange state.
struct Member {
  std::unique_ptr<Algorithm> algorithm;
  std::function<std::size_t()> outstanding;  // safe from any thread
  std::function<PairwiseCounters()> counters;
  bool follows = false;  // a passive AD-PSGD peer: waits for requests rather than starting them
};

inline Member gossip_member(Network& net, int rank, const AlgorithmOptions& o) {
  auto alg = std::make_unique<Gossip>(net.end(rank), net.peers(rank), o);
  auto* raw = alg.get();
  return Member{std::move(alg), [raw] { return raw->outstanding(); }, [raw] { return raw->counters(); },
                false};
}

inline Member adpsgd_member(Network& net, int rank, const AlgorithmOptions& o,
                            const topology::Topology* graph) {
  auto alg = graph ? std::make_unique<AdPsgd>(net.end(rank), net.peers(rank), o, *graph)
                   : std::make_unique<AdPsgd>(net.end(rank), net.peers(rank), o);
  auto* raw = alg.get();
  const bool passive = !raw->active();
  return Member{std::move(alg), [raw] { return raw->outstanding(); }, [raw] { return raw->counters(); },
                passive};
}

// Every exchange settled with both halves applied or neither: a reply applied for each
// request served, a busy answer for each request refused busy, nothing given up.
inline void require_all_settled(const PairwiseCounters& total) {
  INFO("started " << total.started << ", served " << total.served << " (" << total.served_from_snapshot
                  << " from an open snapshot), applied " << total.applied << ", busy " << total.answered_busy
                  << ", expired " << total.expired);
  CHECK(total.applied == total.served);
  CHECK(total.answered_busy == total.refused_busy);
  CHECK(total.started == total.applied + total.answered_busy);
  CHECK(total.expired == 0);
  CHECK(total.dropped_late == 0);
}

inline PairwiseCounters total_counters(const std::vector<Member>& members) {
  PairwiseCounters total;
  for (const auto& m : members) {
    const auto c = m.counters();
    total.started += c.started;
    total.served += c.served;
    total.served_from_snapshot += c.served_from_snapshot;
    total.refused_busy += c.refused_busy;
    total.answered_busy += c.answered_busy;
    total.applied += c.applied;
    total.applied_late += c.applied_late;
    total.expired += c.expired;
    total.dropped_late += c.dropped_late;
    total.send_failures += c.send_failures;
    total.unmatched_replies += c.unmatched_replies;
  }
  return total;
}

struct RunSettings {
  int rounds = 100;
  // Afterwards every peer serves until all requests of all peers are settled, so that
  // the network sum can be compared.
  bool drain = true;
  // Even and odd ranks take turns (two per round), each half parked at a barrier while
  // the other mixes, so that every request across the halves is answered only after its
  // round's deadline. A follower mixes in its turn until a call mixes nothing. Not with
  // silent or killed peers.
  bool take_turns = false;
  std::set<int> silent;  // peers that never call mix() or serve() (a hung process)
  int kill_rank = -1;    // this peer kills its own endpoint instead of round kill_after
  int kill_after = 0;
  // Each peer a fiber of one fiber::Scheduler instead of a thread: time is virtual, so a
  // round lasts exactly as long as the algorithm decided to wait, whatever the machine's
  // load, and mix_seconds can be held to exact bounds.
  bool virtual_time = false;
  // Virtual time only: the training step before each round, which the peer spends
  // serving requests, as a peer's mixer does. Without it time would stand still while a
  // round that only takes what has arrived (gossip with requests still out) returns at
  // once, and the peer would spin.
  Clock::duration virtual_step = 1ms;
};

struct RunReport {
  std::vector<std::vector<double>> mix_seconds;  // per peer, per mix() call
  std::vector<std::exception_ptr> errors;        // per peer
  bool drained = true;
  std::vector<std::string> stuck;  // virtual time: fibers parked with nothing to wake them
};

// Leaders mix s.rounds rounds each and then go on until every leader has; followers
// (passive AD-PSGD peers) mix until every leader is done, then stop instead of waiting
// out their last round deadlines for requests that no longer come.
inline RunReport run_network(Network& net, std::vector<Member>& members, Buffers& buffers,
                             const RunSettings& s) {
  const int n = static_cast<int>(members.size());
  RunReport report;
  report.mix_seconds.resize(static_cast<std::size_t>(n));
  report.errors.resize(static_cast<std::size_t>(n));
  int leaders = 0, participants = 0;
  for (int r = 0; r < n; ++r) {
    if (s.silent.contains(r)) continue;
    ++participants;
    if (!members[static_cast<std::size_t>(r)].follows) ++leaders;
  }
  // Leaders that have done their s.rounds rounds (or died or failed trying).
  std::atomic<int> leaders_done{0}, leaders_past_rounds{0}, done{0};
  std::vector<char> past_rounds(static_cast<std::size_t>(n), 0);
  const auto finish_rounds = [&](int r) {
    auto& flag = past_rounds[static_cast<std::size_t>(r)];
    if (!members[static_cast<std::size_t>(r)].follows && !flag) {
      flag = 1;
      ++leaders_past_rounds;
    }
  };
  std::atomic<bool> drain_failed{false};
  hearsay::testing::FiberBarrier turns(participants);
  const auto total_outstanding = [&] {
    std::size_t total = 0;
    for (int r = 0; r < n; ++r)
      if (!s.silent.contains(r) && r != s.kill_rank)
        total += members[static_cast<std::size_t>(r)].outstanding();
    return total;
  };
  const auto body = [&](int r) {
    auto& member = members[static_cast<std::size_t>(r)];
    auto& buffer = buffers[static_cast<std::size_t>(r)];
    auto& seconds = report.mix_seconds[static_cast<std::size_t>(r)];
    std::uint64_t calls = 0;
    const auto mix = [&] {
      if (s.virtual_time) member.algorithm->serve(buffer, Clock::now() + s.virtual_step);
      const auto t0 = Clock::now();
      const RoundResult result = member.algorithm->mix(buffer, calls++);
      seconds.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      return result;
    };
    // Leaders run s.rounds rounds. A follower (a passive AD-PSGD peer, which serves one
    // request per round) goes on until every leader is done: stopping it after s.rounds
    // would leave the leaders' last requests to time out against a peer that has quit.
    for (int round = 0; round < s.rounds || (member.follows && !s.take_turns); ++round) {
      if (s.take_turns) {
        for (int turn = 0; turn < 2; ++turn) {
          // A follower serves one request per mix(): it goes on until a call mixes
          // nothing, so that no request waits for many turns.
          if (r % 2 == turn)
            while (mix().exchanged > 0 && member.follows) {
            }
          turns.arrive_and_wait();
        }
        continue;
      }
      if (member.follows && leaders_done.load() == leaders) break;
      if (r == s.kill_rank && round == s.kill_after) {
        net.fabric->kill(net.ids[static_cast<std::size_t>(r)]);
        finish_rounds(r);
        return false;
      }
      mix();
    }
    // A leader that is done goes on mixing until every leader is: when threads are
    // scheduled unevenly (other work on the cores), leaders that finished early would
    // otherwise freeze at their values while the late ones still mix with the followers.
    if (!s.take_turns && !member.follows) {
      finish_rounds(r);
      while (leaders_past_rounds.load() < leaders) mix();
    }
    return true;
  };
  const auto peer = [&](int r) {
    bool alive = false;
    try {
      alive = body(r);
    } catch (...) {
      report.errors[static_cast<std::size_t>(r)] = std::current_exception();
      if (s.take_turns) turns.arrive_and_drop();  // the others must not wait for us
      finish_rounds(r);                           // nor for our rounds
    }
    if (!members[static_cast<std::size_t>(r)].follows) ++leaders_done;
    ++done;
    if (!s.drain || !alive) return;
    // Generous: only a lost message or a hang should ever reach it.
    const auto give_up = Clock::now() + 60s;
    try {
      while (!(done.load() == participants && total_outstanding() == 0)) {
        if (Clock::now() > give_up) {
          drain_failed = true;
          return;
        }
        members[static_cast<std::size_t>(r)].algorithm->serve(buffers[static_cast<std::size_t>(r)],
                                                              Clock::now() + 2ms);
      }
    } catch (...) {
      report.errors[static_cast<std::size_t>(r)] = std::current_exception();
    }
  };
  std::vector<int> ranks;
  for (int r = 0; r < n; ++r)
    if (!s.silent.contains(r)) ranks.push_back(r);
  report.stuck = hearsay::testing::run_each(
      ranks, s.virtual_time, [&net](int r) { return net.ids[static_cast<std::size_t>(r)]; }, peer);
  report.drained = !drain_failed;
  return report;
}

inline void require_no_errors(const RunReport& report) {
  for (std::size_t r = 0; r < report.errors.size(); ++r) {
    if (!report.errors[r]) continue;
    try {
      std::rethrow_exception(report.errors[r]);
    } catch (const std::exception& e) {
      FAIL("peer " << r << " threw: " << e.what());
    }
  }
}

}  // namespace hearsay::algorithms::pairwise_testing
