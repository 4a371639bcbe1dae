// Helpers shared by test_allreduce.cpp and test_allreduce_failures.cpp.
#pragma once
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "base/log.hpp"
#include "base/rng.hpp"
#include "gossip/mixing/algorithms/allreduce.hpp"
#include "gossip/network/transport/inproc_transport.hpp"
#include "gossip/network/transport/zmq_transport.hpp"
#include "transport_test_util.hpp"

using namespace hearsay;
using namespace std::chrono_literals;
using algorithms::AlgorithmOptions;
using algorithms::ExchangeRecord;
using algorithms::PeerSet;
using algorithms::RingAllReduce;
using transport::Clock;
using transport::InprocFabric;
using transport::PeerError;
using transport::PeerFailure;

namespace allreduce_test {

inline std::string peer_id(int rank) { return "p" + std::to_string(rank); }

// An integer in [-1000, 1000] that differs between peers, elements and rounds.
inline float value_of(int rank, std::size_t i, std::uint64_t round) {
  const std::uint64_t h = (i * 7919 + static_cast<std::uint64_t>(rank) * 104729 + round * 15485863) % 2001;
  return static_cast<float>(static_cast<int>(h) - 1000);
}

inline std::vector<float> input(int rank, std::size_t size, std::uint64_t round) {
  std::vector<float> v(size);
  for (std::size_t i = 0; i < size; ++i) v[i] = value_of(rank, i, round);
  return v;
}

// Summed in 64-bit integers, independently of any float arithmetic.
inline std::vector<float> expected_sum(int n, std::size_t size, std::uint64_t round) {
  std::vector<float> s(size);
  for (std::size_t i = 0; i < size; ++i) {
    std::int64_t total = 0;
    for (int r = 0; r < n; ++r) total += static_cast<std::int64_t>(value_of(r, i, round));
    s[i] = static_cast<float>(total);
  }
  return s;
}

// The first index where got differs from want, or want.size() when they are equal.
inline std::size_t first_difference(const std::vector<float>& want, std::span<const float> got) {
  if (got.size() != want.size()) return 0;
  for (std::size_t i = 0; i < want.size(); ++i)
    if (got[i] != want[i]) return i;
  return want.size();
}

inline void require_equal(const std::vector<float>& want, const std::vector<float>& got) {
  const std::size_t at = first_difference(want, got);
  INFO("first difference at " << at << ": expected " << (at < want.size() ? want[at] : 0.0f) << ", got "
                              << (at < got.size() ? got[at] : 0.0f) << " (sizes " << want.size() << ", "
                              << got.size() << ")");
  REQUIRE(at == want.size());
}

struct Ring {
  std::shared_ptr<InprocFabric> fabric = InprocFabric::create();
  std::vector<std::unique_ptr<transport::Transport>> transports;
  std::vector<std::unique_ptr<RingAllReduce>> algorithms;
};

inline PeerSet peer_set(int n, int self) {
  PeerSet peers;
  for (int r = 0; r < n; ++r) peers.ids.push_back(peer_id(r));
  peers.self = self;
  return peers;
}

// n in-process transports p0..p(n-1) on `fabric`, each connected to every other but `silent`.
inline std::vector<std::unique_ptr<transport::Transport>> connected_transports(
    const std::shared_ptr<InprocFabric>& fabric, int n, int silent = -1) {
  std::vector<std::unique_ptr<transport::Transport>> transports;
  for (int r = 0; r < n; ++r)
    transports.push_back(
        std::make_unique<transport::InprocTransport>(fabric, transport::testing::inproc_options(peer_id(r))));
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b)
      if (a != b && b != silent) transports[a]->connect(peer_id(b), InprocFabric::address_for(peer_id(b)));
  return transports;
}

// n in-process peers p0..p(n-1). Every peer connects to every other, except that with
// a `silent` rank nobody connects to that one: it connects to everyone and pings them,
// so they can still send to it, but a kill of it reaches nobody as a PeerError and must
// be found by the round deadline and the probe.
inline Ring make_ring(int n, AlgorithmOptions options = {},
                      std::size_t chunk_elements = RingAllReduce::kDefaultChunkElements, int silent = -1) {
  Ring ring;
  ring.transports = connected_transports(ring.fabric, n, silent);
  if (silent >= 0)
    for (int b = 0; b < n; ++b)
      if (b != silent) (void)ring.transports[silent]->ping(peer_id(b), transport::testing::soon());
  for (int r = 0; r < n; ++r)
    ring.algorithms.push_back(
        std::make_unique<RingAllReduce>(*ring.transports[r], peer_set(n, r), options, chunk_elements));
  return ring;
}

// Runs body(rank) on one thread per peer and returns what each threw (null: nothing).
// Catch2 assertions are not thread-safe, so bodies only record and the caller checks.
inline std::vector<std::exception_ptr> on_every_peer(int n, const std::function<void(int)>& body) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

inline void require_no_errors(const std::vector<std::exception_ptr>& errors) {
  for (std::size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r]) continue;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const std::exception& e) {
      FAIL("peer " << r << " threw: " << e.what());
    }
  }
}

// Elements in segment i of a buffer of `size` split over n peers (as documented in
// allreduce.hpp: the first size mod n segments are one longer).
inline std::size_t segment_length(std::size_t size, int n, int i) {
  const auto un = static_cast<std::size_t>(n);
  const auto ui = static_cast<std::size_t>(((i % n) + n) % n);
  return size / un + (ui < size % un ? 1 : 0);
}

}  // namespace allreduce_test
