// PowerSGD all-reduce (--algo allreduce --compress powersgd:R): the low-rank arithmetic
// against a double-precision reference, the plan of which tensors are compressed, and the
// algorithm over the in-process fabric: the same agreed model on every peer to the bit, a
// rank-1 update recovered exactly, the peers' mean exactly the mean of every step (the
// error feedback lives in the models), and the agreed model catching up with it.
//
// Tolerances: the arithmetic accumulates in double and rounds to float once per value,
// so a product of small matrices is within a few float ulps of the reference: 1e-5
// relative to the magnitude of the terms.
#include <cmath>
#include <numeric>

#include "allreduce_test_util.hpp"
#include "gossip/mixing/algorithms/powersgd.hpp"
#include "gossip/mixing/algorithms/registry.hpp"
#include "gossip/mixing/compress/low_rank.hpp"

using namespace allreduce_test;
using algorithms::PowerSgdAllReduce;
using compress::TensorShape;

namespace {

std::vector<float> random_values(std::size_t n, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(rng.normal());
  return v;
}

double norm(std::span<const float> v) {
  double s = 0;
  for (const float x : v) s += static_cast<double>(x) * x;
  return std::sqrt(s);
}

struct PowerRing {
  std::shared_ptr<InprocFabric> fabric = InprocFabric::create();
  std::vector<std::unique_ptr<transport::Transport>> transports;
  std::vector<std::unique_ptr<PowerSgdAllReduce>> algorithms;
};

PowerRing make_power_ring(int n, int rank, std::vector<TensorShape> tensors, double momentum = 0,
                          bool nesterov = false) {
  PowerRing ring;
  ring.transports = connected_transports(ring.fabric, n);
  AlgorithmOptions options;
  options.momentum = momentum;
  options.nesterov = nesterov;
  options.compressor = "powersgd:" + std::to_string(rank);
  options.tensors = std::move(tensors);
  options.round_timeout = 500ms;
  for (int r = 0; r < n; ++r)
    ring.algorithms.push_back(
        std::make_unique<PowerSgdAllReduce>(*ring.transports[r], peer_set(n, r), options));
  return ring;
}

const std::vector<TensorShape> kTensors{{16, 12}, {12, 1}, {8, 8}, {3, 3}};
constexpr std::size_t kValues = 16 * 12 + 12 + 64 + 9;

}  // namespace

TEST_CASE("powersgd: the plan compresses the matrices rank r makes smaller", "[powersgd]") {
  const auto plan = compress::plan_low_rank(kValues, kTensors, 2);
  REQUIRE(plan.matrices.size() == 2);  // 16 x 12 and 8 x 8; 3 x 3 at rank 2 is no smaller
  CHECK(plan.matrices[0].offset == 0);
  CHECK(plan.matrices[1].offset == 16 * 12 + 12);
  CHECK(plan.matrices[1].p_at == 16 * 2);
  CHECK(plan.matrices[1].q_at == 12 * 2);
  REQUIRE(plan.whole.size() == 2);
  CHECK(plan.whole[0].offset == 16 * 12);
  CHECK(plan.whole[0].at == (16 + 8) * 2);
  CHECK(plan.whole[1].size == 9);
  CHECK(plan.p_size == (16 + 8) * 2 + 12 + 9);
  CHECK(plan.q_size == (12 + 8) * 2);

  // Without the model's tensors: 64 x 64 pieces, a shorter last one whole.
  const auto pieces = compress::plan_low_rank(10000, {}, 4);
  CHECK(pieces.matrices.size() == 2);
  REQUIRE(pieces.whole.size() == 1);
  CHECK(pieces.whole[0].size == 10000 - 2 * 4096);

  CHECK_THROWS_WITH(compress::plan_low_rank(kValues + 1, kTensors, 2), Catch::Contains("sum to"));
  CHECK_THROWS(compress::plan_low_rank(kValues, kTensors, 0));
  CHECK_THROWS(compress::plan_low_rank(kValues, kTensors, compress::kMaxRank + 1));
}

TEST_CASE("powersgd: products, orthonormalisation and the outer product match a double reference",
          "[powersgd]") {
  constexpr std::uint64_t rows = 9, cols = 7;
  constexpr int r = 3;
  const auto m = random_values(rows * cols, 1);
  const auto q = random_values(cols * r, 2);
  std::vector<float> p(rows * r), back(cols * r);
  compress::multiply(m.data(), rows, cols, q.data(), r, p.data());
  for (std::uint64_t i = 0; i < rows; ++i)
    for (int k = 0; k < r; ++k) {
      double want = 0;
      for (std::uint64_t j = 0; j < cols; ++j) want += static_cast<double>(m[i * cols + j]) * q[j * r + k];
      CHECK(std::abs(p[i * r + k] - want) <= 1e-5 * (1 + std::abs(want)));
    }
  const auto original = p;
  compress::orthonormalize(p.data(), rows, r);
  for (int a = 0; a < r; ++a)
    for (int b = 0; b < r; ++b) {
      double dot = 0;
      for (std::uint64_t i = 0; i < rows; ++i) dot += static_cast<double>(p[i * r + a]) * p[i * r + b];
      CHECK(std::abs(dot - (a == b ? 1.0 : 0.0)) < 1e-5);
    }
  // The same span: projecting the original columns onto P gives them back.
  // coefficients = original^T P (r x r), so P coefficients^T = P P^T original.
  std::vector<float> coefficients(r * r);
  compress::multiply_transposed(original.data(), rows, r, p.data(), r, coefficients.data());
  std::vector<float> rebuilt(rows * r, 0.0f);
  compress::add_outer(rebuilt.data(), rows, r, p.data(), coefficients.data(), r, 1.0);
  for (std::size_t x = 0; x < rebuilt.size(); ++x) CHECK(std::abs(rebuilt[x] - original[x]) < 1e-4);

  compress::multiply_transposed(m.data(), rows, cols, p.data(), r, back.data());
  for (std::uint64_t j = 0; j < cols; ++j)
    for (int k = 0; k < r; ++k) {
      double want = 0;
      for (std::uint64_t i = 0; i < rows; ++i) want += static_cast<double>(m[i * cols + j]) * p[i * r + k];
      CHECK(std::abs(back[j * r + k] - want) <= 1e-5 * (1 + std::abs(want)));
    }

  std::vector<float> zero_column{1, 0, 2, 0, 3, 0};  // 3 x 2, the second column 0
  compress::orthonormalize(zero_column.data(), 3, 2);
  CHECK(zero_column[1] == 0.0f);
  CHECK(zero_column[3] == 0.0f);
  CHECK(std::abs(zero_column[0] - 1 / std::sqrt(14.0)) < 1e-6);
}

namespace {

// Each peer's update this round: its own full-rank values, or scale_r * u v^T.
std::vector<float> update(int peer, std::uint64_t round, bool rank_one) {
  if (!rank_one) return random_values(kValues, 1000 * round + static_cast<std::uint64_t>(peer));
  const auto u = random_values(16, 7), v = random_values(12, 8);
  std::vector<float> d(kValues, 0.0f);
  const float scale = 1.0f + static_cast<float>(peer);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 12; ++j) d[static_cast<std::size_t>(i * 12 + j)] = scale * u[i] * v[j];
  return d;
}

// Runs `rounds` rounds on n peers from a common start, each adding update() before mixing;
// returns every peer's parameters after every round.
std::vector<std::vector<std::vector<float>>> run(PowerRing& ring, int n, std::uint64_t rounds, bool rank_one,
                                                 const std::vector<float>& start) {
  std::vector<std::vector<std::vector<float>>> after(static_cast<std::size_t>(n));
  require_no_errors(on_every_peer(n, [&](int r) {
    auto x = start;
    auto& algorithm = *ring.algorithms[static_cast<std::size_t>(r)];
    algorithm.mix(x, 0);  // agrees on the start
    for (std::uint64_t round = 1; round <= rounds; ++round) {
      const auto d = update(r, round, rank_one);
      for (std::size_t i = 0; i < x.size(); ++i) x[i] += d[i];
      algorithm.mix(x, round);
      after[static_cast<std::size_t>(r)].push_back(x);
    }
  }));
  return after;
}

}  // namespace

TEST_CASE("powersgd: a rank-1 update is averaged exactly, and every peer agrees to the bit", "[powersgd]") {
  constexpr int n = 4;
  PowerRing ring = make_power_ring(n, 1, kTensors);
  const auto start = random_values(kValues, 99);
  const auto after = run(ring, n, 1, true, start);
  std::vector<float> want = start;
  for (int r = 0; r < n; ++r) {
    const auto d = update(r, 1, true);
    for (std::size_t i = 0; i < want.size(); ++i) want[i] += d[i] / n;
  }
  for (int r = 0; r < n; ++r) {
    INFO("peer " << r);
    const auto reference = ring.algorithms[static_cast<std::size_t>(r)]->reference();
    REQUIRE(std::ranges::equal(reference, ring.algorithms[0]->reference()));
    for (std::size_t i = 0; i < want.size(); ++i) {
      CHECK(std::abs(reference[i] - want[i]) < 1e-4);
      CHECK(std::abs(after[static_cast<std::size_t>(r)][0][i] - want[i]) < 1e-4);
    }
    CHECK(norm(ring.algorithms[static_cast<std::size_t>(r)]->error()) < 1e-3);
  }
}

TEST_CASE("powersgd: the momentum runs over the agreed update, the same on every peer", "[powersgd]") {
  // Rank-1 updates pass exactly, so every round's agreed update is the same Δ (the mean of
  // the peers' updates) and the agreed model follows the momentum's own recurrence:
  // u_t = β u_(t-1) + Δ, x_ref += u_t (heavy ball) or Δ + β u_t (Nesterov).
  constexpr int n = 3;
  constexpr std::uint64_t kRounds = 6;
  constexpr double beta = 0.9;
  const auto start = random_values(kValues, 21);
  std::vector<double> delta(kValues, 0.0);
  for (int r = 0; r < n; ++r) {
    const auto d = update(r, 1, true);
    for (std::size_t i = 0; i < kValues; ++i) delta[i] += static_cast<double>(d[i]) / n;
  }
  for (const bool nesterov : {false, true}) {
    INFO((nesterov ? "nesterov" : "heavy ball"));
    PowerRing ring = make_power_ring(n, 1, kTensors, beta, nesterov);
    const auto after = run(ring, n, kRounds, true, start);
    std::vector<double> want(start.begin(), start.end()), u(kValues, 0.0);
    for (std::uint64_t t = 1; t <= kRounds; ++t)
      for (std::size_t i = 0; i < kValues; ++i) {
        u[i] = beta * u[i] + delta[i];
        want[i] += nesterov ? delta[i] + beta * u[i] : u[i];
      }
    double worst = 0, scale = 0, past_plain = 0, plain = 0;
    for (std::size_t i = 0; i < kValues; ++i) {
      const double reference = ring.algorithms[0]->reference()[i];
      worst = std::max(worst, std::abs(reference - want[i]));
      scale = std::max(scale, std::abs(want[i] - start[i]));
      past_plain = std::max(past_plain, std::abs(reference - (start[i] + kRounds * delta[i])));
      plain = std::max(plain, std::abs(kRounds * delta[i]));
    }
    CHECK(worst < 1e-5 * scale);  // float rounding of a few terms per round
    CHECK(past_plain > plain);    // 6 rounds at β 0.9 move 17.9 Δ (heavy ball), not 6 Δ
    for (int r = 1; r < n; ++r) {
      REQUIRE(std::ranges::equal(ring.algorithms[static_cast<std::size_t>(r)]->reference(),
                                 ring.algorithms[0]->reference()));
      REQUIRE(std::ranges::equal(ring.algorithms[static_cast<std::size_t>(r)]->velocity(),
                                 ring.algorithms[0]->velocity()));
    }
    // Each peer's model is the agreed one plus its own (here nothing) still to send.
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < kValues; ++i)
        CHECK(std::abs(after[static_cast<std::size_t>(r)].back()[i] - ring.algorithms[0]->reference()[i]) <
              1e-3);
  }
  auto fabric = InprocFabric::create();
  auto transports = connected_transports(fabric, 2);
  AlgorithmOptions bad;
  bad.compressor = "powersgd:1";
  bad.momentum = 1.0;
  CHECK_THROWS_WITH(PowerSgdAllReduce(*transports[0], peer_set(2, 0), bad), Catch::Contains("momentum"));
}

TEST_CASE("powersgd: the peers' mean is exactly the mean of every step, and the agreed model catches up",
          "[powersgd]") {
  constexpr int n = 3;
  constexpr std::uint64_t kRounds = 40;
  PowerRing ring = make_power_ring(n, 2, kTensors);
  const auto start = random_values(kValues, 5);
  const auto after = run(ring, n, kRounds, false, start);
  for (int r = 1; r < n; ++r)
    REQUIRE(std::ranges::equal(ring.algorithms[static_cast<std::size_t>(r)]->reference(),
                               ring.algorithms[0]->reference()));
  const auto reference = ring.algorithms[0]->reference();

  // n (x_ref - x_0) + sum of the errors = the sum of every peer's updates, whatever the
  // rank; and the models hold the errors, so their sum is that too.
  std::vector<double> total(kValues, 0.0);
  for (std::uint64_t round = 1; round <= kRounds; ++round)
    for (int r = 0; r < n; ++r) {
      const auto d = update(r, round, false);
      for (std::size_t i = 0; i < kValues; ++i) total[i] += d[i];
    }
  double worst = 0, worst_models = 0, lost = 0, scale = 0;
  for (std::size_t i = 0; i < kValues; ++i) {
    double errors = 0, models = 0;
    for (int r = 0; r < n; ++r) {
      errors += ring.algorithms[static_cast<std::size_t>(r)]->error()[i];
      models += static_cast<double>(after[static_cast<std::size_t>(r)].back()[i]) - start[i];
    }
    const double moved = n * (static_cast<double>(reference[i]) - start[i]);
    worst = std::max(worst, std::abs(moved + errors - total[i]));
    worst_models = std::max(worst_models, std::abs(models - total[i]));
    lost += (moved - total[i]) * (moved - total[i]);
    scale += total[i] * total[i];
  }
  CHECK(worst < 1e-3);  // float rounding over 40 rounds of values of magnitude ~10
  CHECK(worst_models < 1e-3);
  // The errors stay bounded while the sum grows: after 40 rounds the model has moved by
  // the exact sum but for a small part.
  CHECK(std::sqrt(lost / scale) < 0.35);  // 0.23 measured
  CHECK(ring.algorithms[0]->floats_per_round() == (16 + 8 + 12 + 8) * 2 + 12 + 9);
}

TEST_CASE("powersgd: --compress powersgd:R is all-reduce's, and the others say what they take",
          "[powersgd]") {
  const auto* allreduce = algorithms::find_algorithm("allreduce");
  const auto* dpsgd = algorithms::find_algorithm("dpsgd");
  const auto* gossip = algorithms::find_algorithm("gossip");
  REQUIRE(allreduce != nullptr);
  REQUIRE(dpsgd != nullptr);
  REQUIRE(gossip != nullptr);
  CHECK_FALSE(algorithms::compress_refusal(*allreduce, "powersgd:2"));
  CHECK_FALSE(algorithms::compress_refusal(*allreduce, "int8"));
  CHECK_FALSE(algorithms::compress_refusal(*dpsgd, "topk:1%"));
  CHECK_THAT(algorithms::compress_refusal(*dpsgd, "powersgd:2").value_or(""),
             Catch::Contains("PowerSGD") && Catch::Contains("topk:P%"));
  CHECK_THAT(algorithms::compress_refusal(*allreduce, "sign").value_or(""),
             Catch::Contains("CHOCO") && Catch::Contains("powersgd:R"));
  CHECK_THAT(algorithms::compress_refusal(*gossip, "powersgd:2").value_or(""), Catch::Contains("f16"));
  CHECK_THAT(algorithms::compress_refusal(*allreduce, "powersgd:0").value_or(""), Catch::Contains("1..32"));
  CHECK_THAT(algorithms::compress_refusal(*allreduce, "powersgd:x").value_or(""), Catch::Contains("1..32"));
  CHECK(compress::low_rank("powersgd:4") == 4);
  CHECK_FALSE(compress::low_rank("topk:4%"));
  CHECK_FALSE(compress::is_difference_compressor("powersgd:4"));
  CHECK_THROWS_WITH(compress::make_compressor("powersgd:4", 100), Catch::Contains("not a compressor"));
  // powergossip:R is dpsgd's low-rank spec, not all-reduce's.
  CHECK(compress::power_gossip("powergossip:3") == 3);
  CHECK_FALSE(compress::power_gossip("powersgd:3"));
  CHECK_FALSE(compress::low_rank("powergossip:3"));
  CHECK_FALSE(compress::is_difference_compressor("powergossip:3"));
  CHECK_THROWS_WITH(compress::make_compressor("powergossip:3", 100), Catch::Contains("not a compressor"));
  CHECK_FALSE(algorithms::compress_refusal(*dpsgd, "powergossip:3"));
  CHECK_THAT(algorithms::compress_refusal(*allreduce, "powergossip:3").value_or(""),
             Catch::Contains("PowerGossip") && Catch::Contains("powersgd:R"));
}

TEST_CASE("powersgd: a peer that stops taking part is named by the others", "[powersgd]") {
  constexpr int n = 3;
  PowerRing ring = make_power_ring(n, 2, kTensors);
  const auto start = random_values(kValues, 5);
  const auto errors = on_every_peer(n, [&](int r) {
    auto x = start;
    auto& algorithm = *ring.algorithms[static_cast<std::size_t>(r)];
    algorithm.mix(x, 0);
    if (r == 2) return;  // leaves after the first round, without a word
    algorithm.mix(x, 1);
  });
  for (int r = 0; r < 2; ++r) {
    INFO("peer " << r);
    REQUIRE(errors[static_cast<std::size_t>(r)]);
    try {
      std::rethrow_exception(errors[static_cast<std::size_t>(r)]);
    } catch (const PeerError& e) {
      CHECK_THAT(e.what(), Catch::Contains("p"));
    } catch (const std::exception& e) {
      FAIL("not a PeerError: " << e.what());
    }
  }
  CHECK_FALSE(errors[2]);
}
