// Quasi-global momentum (quasi_global_momentum.hpp): the recurrence as the paper writes
// it, against a double-precision reference; on D-PSGD over a ring the network average
// follows the same recurrence with the peers' mean gradient (mixing keeps the average, so
// the momentum of the average is the average of the momenta); only the parameters get it.
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <vector>

#include "gossip/mixing/algorithms/dpsgd.hpp"
#include "gossip/mixing/algorithms/quasi_global_momentum.hpp"
#include "graph_algorithm_test_util.hpp"
#include "peer/peer_config.hpp"
#include "peer_config_test_util.hpp"

using namespace hearsay;
using namespace hearsay::algorithms;
using namespace hearsay::algorithms::testing;
using namespace peer_config_test;
using namespace std::chrono_literals;

namespace {

// One peer's rounds as the Mixer runs them: a local step x -= lr g (the optimizer without
// momentum), then the momentum around the inner algorithm's round.
class LocalStepsWithMomentum final : public Algorithm {
 public:
  LocalStepsWithMomentum(std::unique_ptr<Algorithm> inner, std::vector<float> gradient, double lr,
                         double beta)
      : Algorithm(inner->transport(), inner->peers(), inner->options()),
        inner_(std::move(inner)),
        gradient_(std::move(gradient)),
        lr_(static_cast<float>(lr)),
        momentum_(beta, gradient_.size()) {}
  std::string_view name() const override { return "with-momentum"; }
  RoundResult mix(std::span<float> params, std::uint64_t round) override {
    for (std::size_t i = 0; i < params.size(); ++i) params[i] -= lr_ * gradient_[i];
    momentum_.before_round(params);
    const RoundResult r = inner_->mix(params, round);
    momentum_.after_round(params);
    return r;
  }

 private:
  std::unique_ptr<Algorithm> inner_;
  std::vector<float> gradient_;
  float lr_;
  QuasiGlobalMomentum momentum_;
};

// The paper's recurrence for one model without mixing, in double: x_half = x − lr g −
// β v; v = β v + (1 − β) (x − x_half) from the second round on (the first starts x_t).
struct Reference {
  std::vector<double> x, v;
  bool started = false;
  void round(std::span<const double> g, double lr, double beta) {
    std::vector<double> next(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) next[i] = x[i] - lr * g[i] - (started ? beta * v[i] : 0.0);
    if (started)
      for (std::size_t i = 0; i < x.size(); ++i) v[i] = beta * v[i] + (1 - beta) * (x[i] - next[i]);
    else
      v.assign(x.size(), 0.0);
    started = true;
    x = std::move(next);
  }
};

}  // namespace

TEST_CASE("quasi-global momentum: alone it is heavy-ball over the rounds' changes", "[momentum]") {
  // Without mixing the change across a round is the round's own step: v = β v + (1 − β)
  // (lr g + β v) = β (2 − β) v + (1 − β) lr g, which tends to heavy-ball's lr g / (1 − β),
  // 1 − 0.99^(t − 1) of the way after t rounds at β 0.9 (the first round starts x_t).
  constexpr double lr = 0.1, beta = 0.9;
  QuasiGlobalMomentum momentum(beta, 3);
  std::vector<float> x{1.0f, -2.0f, 0.5f, 7.0f};  // the last value is no parameter
  const std::vector<double> g{1.0, -0.5, 2.0};
  Reference ref{{1.0, -2.0, 0.5}, {}};
  for (int round = 0; round < 200; ++round) {
    for (std::size_t i = 0; i < g.size(); ++i) x[i] -= static_cast<float>(lr * g[i]);
    momentum.before_round(x);
    momentum.after_round(x);  // (no mixing)
    ref.round(g, lr, beta);
  }
  // float against double over 200 rounds of values up to 200: a few ulps per round. v
  // comes from differences of those values, steps near 1 taken from values near 200 (an
  // ulp there is 1.5e-5 of a step), so it is held to 1e-4.
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO("value " << i);
    CHECK(x[i] == Approx(ref.x[i]).epsilon(1e-5));
    CHECK(momentum.velocity()[i] == Approx(ref.v[i]).epsilon(1e-4));
    const double closed = (1 - std::pow(beta * (2 - beta), 199)) * lr * g[i] / (1 - beta);
    CHECK(momentum.velocity()[i] == Approx(closed).epsilon(1e-4));
  }
  CHECK(x[3] == 7.0f);  // untouched: only the first `values` numbers get the momentum
  CHECK_THROWS_AS(QuasiGlobalMomentum(1.0, 3), std::invalid_argument);
  CHECK_THROWS_AS(QuasiGlobalMomentum(-0.1, 3), std::invalid_argument);
}

TEST_CASE("quasi-global momentum on D-PSGD: the average follows the recurrence of the mean gradient",
          "[momentum][graphalgo]") {
  constexpr int n = 8;
  constexpr std::size_t size = 64;
  constexpr double lr = 0.05, beta = 0.9;
  constexpr int rounds = 60;
  Network net = make_network(n);
  const topology::Topology graph = graph_of(topology::GraphKind::ring, n);
  AlgorithmOptions options;
  options.round_timeout = 60s;  // only a hang reaches it
  // Heterogeneous peers: each its own constant gradient, as non-IID shards pull each peer
  // its own way.
  const auto gradients = random_buffers(n, size, 7);
  std::vector<std::unique_ptr<Algorithm>> algs;
  for (int r = 0; r < n; ++r)
    algs.push_back(std::make_unique<LocalStepsWithMomentum>(
        std::make_unique<Dpsgd>(*net.transports[static_cast<std::size_t>(r)], net.peers(r), options, graph),
        gradients[static_cast<std::size_t>(r)], lr, beta));
  auto buffers = random_buffers(n, size, 3);
  Reference ref{network_mean(buffers), {}};
  const auto mean_gradient = network_mean(gradients);
  std::vector<Algorithm*> ptrs;
  for (auto& a : algs) ptrs.push_back(a.get());
  Schedule schedule;
  schedule.count = rounds;
  const auto result = run_rounds(ptrs, buffers, schedule);
  for (const auto& peer : result.results)
    for (const RoundResult& r : peer) REQUIRE(r.timed_out + r.failed == 0);
  for (int round = 0; round < rounds; ++round) ref.round(mean_gradient, lr, beta);
  // Mixing keeps the average to float rounding per round (test_dpsgd); the average's
  // momentum is then the paper's with the mean gradient. 60 rounds of steps near 1: 1e-4.
  const auto mean = network_mean(buffers);
  double worst = 0;
  for (std::size_t i = 0; i < size; ++i) worst = std::max(worst, std::abs(mean[i] - ref.x[i]));
  INFO("largest difference of the average from the reference: " << worst);
  CHECK(worst < 1e-4);
  // And the peers stay together: the ring contracts what the momentum adds.
  INFO("consensus error " << consensus_error(buffers));
  CHECK(consensus_error(buffers) < 0.5 * norm(mean));
}

TEST_CASE("quasi-global momentum: --momentum-kind hands the momentum from the optimizer to the mixer",
          "[momentum][peer-config]") {
  const auto dpsgd = [](std::vector<std::string> extra) {
    std::vector<std::string> a{"--algo", "dpsgd", "--rank", "0", "--world", "4", "--momentum", "0.8"};
    a.insert(a.end(), extra.begin(), extra.end());
    return with_base(a);
  };
  const auto qg = parse_peer(dpsgd({"--momentum-kind", "quasi-global"}));
  CHECK(quasi_global_momentum(qg));
  CHECK(algorithm_applies_momentum(qg));
  CHECK(optimizer_settings(qg).momentum == 0.0f);  // the optimizer steps without it
  CHECK(qg.train.momentum == Approx(0.8f));
  const auto local = parse_peer(dpsgd({}));
  CHECK(local.mixing.momentum_kind == "local");
  CHECK_FALSE(algorithm_applies_momentum(local));
  CHECK(optimizer_settings(local).momentum == Approx(0.8f));
  // What it cannot run with says what to do instead.
  CHECK_THAT(problem(dpsgd({"--momentum-kind", "quasi-global", "--nesterov"})),
             Catch::Contains("leave out --nesterov"));
  CHECK_THAT(problem(dpsgd({"--momentum-kind", "quasi-global", "--optimizer", "adamw"})),
             Catch::Contains("use --optimizer sgd"));
  CHECK_THAT(problem(with_base({"--algo", "allreduce", "--rank", "0", "--world", "4", "--compress",
                                "powersgd:2", "--momentum-kind", "quasi-global"})),
             Catch::Contains("leave --momentum-kind local"));
  // Over a coarse consensus step the momentum would drive the peers apart; int4's copies keep up.
  for (const char* algo : {"dpsgd", "gossip"})
    for (const char* spec : {"topk:1%", "randk:1%", "sign", "powergossip:2"}) {
      if (std::string(algo) == "gossip" && std::string(spec) == "powergossip:2") continue;  // dpsgd's only
      CHECK_THAT(problem(with_base({"--algo", algo, "--rank", "0", "--world", "4", "--graph", "ring",
                                    "--compress", spec, "--momentum-kind", "quasi-global"})),
                 Catch::Contains("coarse estimate") && Catch::Contains("use --momentum-kind local"));
    }
  for (const char* spec : {"int4", "int8", "f16"})  // int4's copies keep up; values carry no estimate
    CHECK(problem(dpsgd({"--compress", spec, "--momentum-kind", "quasi-global"})).empty());
  CHECK(problem(dpsgd({"--compress", "topk:1%"})).empty());
  CHECK_THAT(problem(with_base({"--algo", "none", "--momentum-kind", "quasi-global"})),
             Catch::Contains("--algo none mixes nothing"));
  CHECK_THAT(problem(dpsgd({"--momentum-kind", "global"})), Catch::Contains("--momentum-kind"));
  // (tracking, d2 and relaysgd read their update off their last result: no --overlap.)
  for (const char* algo : {"tracking", "d2", "relaysgd"})
    CHECK_THAT(problem(with_base({"--algo", algo, "--rank", "0", "--world", "4", "--overlap"})),
               Catch::Contains("leave --overlap out"));
}
