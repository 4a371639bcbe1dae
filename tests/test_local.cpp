// Local SGD's full averaging over the in-process transport: the exact network average in
// one round, identical on every peer; peers that are dead or silent are left out.
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>

#include "gossip/mixing/algorithms/local.hpp"
#include "graph_algorithm_test_util.hpp"

using namespace hearsay;
using namespace hearsay::algorithms;
using namespace hearsay::algorithms::testing;
using namespace std::chrono_literals;
using topology::GraphKind;
using topology::GraphSpec;
using topology::Topology;

namespace {

Topology complete_graph(int n) {
  GraphSpec s;
  s.kind = GraphKind::complete;
  s.peers = n;
  return Topology::make(s);
}

// The mean of the given peers' buffers, in double.
std::vector<double> mean_of(const std::vector<std::vector<float>>& xs, const std::vector<int>& ranks) {
  std::vector<std::vector<float>> some;
  for (int r : ranks) some.push_back(xs[static_cast<std::size_t>(r)]);
  return network_mean(some);
}

// Each value is the double sum of m terms x_k / m rounded once to float: within half an
// ulp of the mean (2^-24 relative) plus the double sum's error, below 2^-40 of the largest value.
void require_exact_average(const std::vector<float>& x, const std::vector<double>& mean, double scale) {
  for (std::size_t i = 0; i < x.size(); ++i)
    REQUIRE(std::abs(x[i] - mean[i]) <= std::ldexp(std::abs(mean[i]), -24) + std::ldexp(scale, -40));
}

}  // namespace

TEST_CASE("local: one round gives every peer the exact average, bit for bit the same", "[graphalgo][local]") {
  constexpr int n = 8;
  const wire::Dtype dtype = GENERATE(wire::Dtype::f32, wire::Dtype::bf16);
  INFO("payload " << wire::to_string(dtype));
  Network net = make_network(n);
  AlgorithmOptions options;
  options.round_timeout = 60s;  // only a hang reaches it
  options.compress = dtype;
  auto algs = make_algorithms<LocalSgd>(net, options, complete_graph(n));
  auto buffers = random_buffers(n, 1000, 21);
  const auto mean = network_mean(buffers);
  const double scale = max_abs(buffers);

  const RunResult run = run_rounds(pointers(algs), buffers, Schedule{});
  for (int rank = 0; rank < n; ++rank) {
    CHECK(run.results[rank][0].exchanged == n - 1);
    CHECK(run.results[rank][0].timed_out == 0);
    // Everyone averaged the same values in the same order (its own as the others
    // decoded it), so all agree exactly, compressed or not.
    REQUIRE(buffers[rank] == buffers[0]);
  }
  if (dtype == wire::Dtype::f32) {
    require_exact_average(buffers[0], mean, scale);
  } else {
    // bf16 keeps 8 significant bits: each value is off by at most 2^-8 of itself.
    REQUIRE(max_abs_error(buffers, mean) <= std::ldexp(scale, -8));
  }
}

TEST_CASE("local: a dead peer is left out at once, a silent one after the deadline", "[graphalgo][local]") {
  constexpr int n = 5;
  constexpr int missing = 2;
  const bool killed = GENERATE(true, false);
  INFO((killed ? "killed" : "silent") << " peer");
  const auto timeout = 300ms;
  Network net = make_network(n);
  AlgorithmOptions options;
  options.round_timeout = timeout;
  auto algs = make_algorithms<LocalSgd>(net, options, complete_graph(n));
  auto buffers = random_buffers(n, 1000, 22);
  const auto before = buffers;
  if (killed) net.fabric->kill(peer_id(missing));

  auto running = pointers(algs);
  running[missing] = nullptr;
  const RunResult run = run_rounds(running, buffers, Schedule{});
  const std::vector<int> survivors{0, 1, 3, 4};
  const auto mean = mean_of(before, survivors);
  const double deadline_s = std::chrono::duration<double>(timeout).count();
  for (int rank : survivors) {
    INFO("peer " << rank);
    const RoundResult& r = run.results[rank][0];
    CHECK(r.exchanged == n - 2);
    CHECK(r.failed == (killed ? 1 : 0));
    CHECK(r.timed_out == (killed ? 0 : 1));
    if (killed) {
      CHECK(run.seconds[rank][0] < deadline_s);
    } else {
      CHECK(run.seconds[rank][0] >= deadline_s);  // nothing from a silent peer ends the wait early
    }
    REQUIRE(buffers[rank] == buffers[0]);
    require_exact_average(buffers[rank], mean, max_abs(before));
  }
  REQUIRE(buffers[missing] == before[missing]);
}
