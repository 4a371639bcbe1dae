// DivergenceWatch (model/divergence.hpp) and the simulator's verdict built on it
// (sim/divergence_check.hpp): a run that blew up is told from one that did not, and the
// step where it began is named.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "model/divergence.hpp"
#include "sim/divergence_check.hpp"

namespace hearsay {
namespace {

struct Report {
  std::int64_t step;
  double loss, distance;
};

std::optional<Divergence> replay(DivergenceWatch& watch, const std::vector<Report>& reports) {
  std::optional<Divergence> first;
  for (const Report& r : reports)
    if (auto d = watch.observe(r.step, r.loss, r.distance); d && !first) first = d;
  return first;
}

// The partner distances and losses of the gossip peer that blew up behind one slow link
// (rank 6 of 8 LeNet peers, one interval every 2 steps), before the fix.
const std::vector<Report> kBlowUp = {
    {1, 2.69, 2.57},     {3, 1.35, 3.72},     {5, 1.77, 2.60},   {7, 0.87, 1.65},   {9, 1.16, 1.87},
    {11, 0.79, 1.24},    {13, 0.84, 1.18},    {15, 0.82, 0.684}, {17, 0.73, 0.612}, {19, 1.32, 0.654},
    {21, 0.87, 0.588},   {23, 1.00, 0.854},   {25, 2.05, 1.41},  {27, 8.89, 3.97},  {29, 748.51, 82.4},
    {31, 1.03e8, 5.9e5}, {33, 2.9e23, 2.6e17}};

TEST_CASE("divergence: a loss that blows up is seen, with the step where it began", "[divergence]") {
  DivergenceWatch watch(10);
  const auto d = replay(watch, kBlowUp);
  REQUIRE(d);
  // 10 x ln(10) = 23: the loss of 749 at step 29 is the first above it; its rise began
  // at step 25, the first step from which it stayed above twice its best before (0.73).
  CHECK(d->step == 29);
  CHECK(d->began_at == 25);
  CHECK_THAT(d->what, Catch::Contains("the loss grew to 749"));
  CHECK(d->describe() == "diverged at step 29 (began at step 25): " + d->what);
  CHECK(watch.divergence() == d);
  CHECK_FALSE(watch.observe(35, 1.0, 1.0));  // reported once
}

TEST_CASE("divergence: a loss that is not finite diverges at once", "[divergence]") {
  DivergenceWatch watch(10);
  CHECK_FALSE(watch.observe(1, 2.3, -1));
  CHECK_FALSE(watch.observe(2, 1.1, -1));
  const auto d = watch.observe(3, std::nan(""), -1);
  REQUIRE(d);
  CHECK(d->step == 3);
  CHECK(d->began_at == 3);
  CHECK(d->what == "the loss became nan");
}

TEST_CASE("divergence: a partner distance that grows a thousandfold diverges, with a finite loss",
          "[divergence]") {
  DivergenceWatch watch(10);
  std::optional<Divergence> d;
  std::int64_t step = 0;
  // Five early reports set the scale (at most 3), then the distance settles and explodes
  // while the loss stays put: mixing that amplifies differences.
  for (double distance : {3.0, 2.0, 1.5, 1.0, 0.8, 0.6, 0.5, 0.5, 40.0, 900.0, 4000.0}) {
    d = watch.observe(++step, 1.0, distance);
    if (d) break;
  }
  REQUIRE(d);
  CHECK(d->step == 11);
  CHECK(d->began_at == 9);
  CHECK(d->what == "the partner distance grew from 0.5 to 4e+03");
}

TEST_CASE("divergence: healthy runs, restarts and partitions are not divergence", "[divergence]") {
  SECTION("a loss that falls, with noise and a distance that shrinks") {
    DivergenceWatch watch(10);
    std::optional<Divergence> d;
    for (int i = 1; i <= 200 && !d; ++i)
      d = watch.observe(i, 2.3 / (1 + 0.05 * i) * (1 + 0.3 * std::sin(i)), 3.0 / (1 + 0.1 * i));
    CHECK_FALSE(d);
    CHECK_FALSE(watch.excursion_began());
  }
  SECTION("a partition: peers drift apart tenfold, then back") {
    DivergenceWatch watch(10);
    std::optional<Divergence> d;
    std::int64_t step = 0;
    for (double distance : {2.0, 1.0, 0.5, 0.5, 0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 1.0, 0.5})
      if (auto seen = watch.observe(++step, 0.5, distance)) d = seen;
    CHECK_FALSE(d);
  }
  SECTION("no exchanges (distance 0) and intervals without a distance are no reports") {
    DivergenceWatch watch(10);
    for (int i = 1; i <= 20; ++i) CHECK_FALSE(watch.observe(i, 1.0, i % 2 ? 0.0 : -1.0));
  }
  CHECK_THROWS_AS(DivergenceWatch(1), std::invalid_argument);
}

nlohmann::json metrics(std::int64_t step, double loss, double distance) {
  return {{"type", "metrics"}, {"step", step}, {"loss", loss}, {"partner_distance", distance}};
}

sim::Evaluation evaluation(double time_s, double acc_avg, double acc_mean, double consensus,
                           double sq_norm = 10.0) {
  sim::Evaluation e;
  e.time_s = time_s;
  e.run_epochs = time_s;
  e.acc_avg_model = acc_avg;
  e.acc_mean_peer = acc_mean;
  e.consensus_distance = consensus;
  e.avg_model_sq_norm = sq_norm;
  return e;
}

// An evaluation every `every` epochs with these consensus distances, of a model whose
// squared norm is about LeNet's (300).
std::vector<sim::Evaluation> distance_curve(const std::vector<double>& distances, double every) {
  std::vector<sim::Evaluation> c;
  for (std::size_t i = 0; i < distances.size(); ++i)
    c.push_back(evaluation(every * static_cast<double>(i + 1), 0.86, 0.86, distances[i], 300));
  return c;
}

TEST_CASE("sim: a run that diverged is named, with the peer and the step", "[divergence]") {
  const std::vector<sim::Evaluation> fine = {evaluation(1, 0.7, 0.7, 0.5), evaluation(2, 0.8, 0.8, 0.3)};
  SECTION("healthy peers and a good model: no verdict") {
    sim::DivergenceCheck check(3, 10);
    for (int r = 0; r < 3; ++r)
      for (int s = 1; s <= 20; ++s) check.observe(r, metrics(s, 2.0 / s, 1.0 / s));
    CHECK(check.verdict(fine, true).empty());
  }
  SECTION("a peer's own diverged record, the earliest to begin") {
    sim::DivergenceCheck check(3, 10);
    check.observe(
        1, {{"type", "diverged"}, {"step", 34}, {"began_at_step", 25}, {"what", "the loss became nan"}});
    check.observe(
        2, {{"type", "diverged"}, {"step", 40}, {"began_at_step", 30}, {"what", "the loss became nan"}});
    CHECK(check.verdict(fine, true) == "diverged: rank1 from step 25 (at step 34 the loss became nan)");
  }
  SECTION("metrics that blow up, replayed, though the peer did not say so; a restart starts afresh") {
    sim::DivergenceCheck check(8, 10);
    for (const auto& r : kBlowUp) check.observe(6, metrics(r.step, r.loss, r.distance));
    CHECK(check.verdict(fine, true) ==
          "diverged: rank6 from step 25 (at step 29 the loss grew to 749 (a uniform "
          "guess has 2.3))");
    sim::DivergenceCheck restarted(8, 10);
    for (const auto& r : kBlowUp) restarted.observe(6, metrics(r.step, r.loss, r.distance));
    restarted.observe(6, {{"type", "start"}});
    // The replay starts over, but what the first process reported stays: it did diverge.
    CHECK_FALSE(restarted.verdict(fine, true).empty());
  }
  SECTION("a loss written as null (not finite) diverges") {
    sim::DivergenceCheck check(2, 10);
    check.observe(0, metrics(1, 2.3, 1.0));
    check.observe(0, {{"type", "metrics"}, {"step", 2}, {"loss", nullptr}, {"partner_distance", 1.0}});
    CHECK(check.verdict(fine, true) == "diverged: rank0 from step 2 (at step 2 the loss became nan)");
  }
  SECTION("a model at chance at the end, or peers at chance") {
    sim::DivergenceCheck check(2, 10);
    CHECK(check.verdict({evaluation(1, 0.7, 0.7, 0.5), evaluation(2, 0.105, 0.7, 0.3)}, true) ==
          "diverged: the averaged model ends at chance (accuracy 0.1050)");
    CHECK(check.verdict({evaluation(2, 0.6, 0.11, 0.3)}, true) ==
          "diverged: the peers end at chance (mean accuracy 0.1100)");
    // Without a final evaluation (every peer failed) the last point says nothing of the end.
    CHECK(check.verdict({evaluation(1, 0.1, 0.1, 0.5)}, false).empty());
  }
  SECTION("an averaged model far from its peers' own, either way, is apart; near them it is not") {
    sim::DivergenceCheck check(8, 10);
    // ResNet-20 with int8 (an average as good as f32's, peers near chance) and randk:1%
    // (peers trained alone, their average near chance).
    CHECK(check.verdict({evaluation(1, 0.8, 0.7, 0.3), evaluation(2, 0.8778, 0.1493, 7.0)}, true) ==
          "apart: the peers' own models end at a mean accuracy of 0.1493 and their average at 0.8778 "
          "(consensus distance 7): the peers hold no common model; a smaller --consensus-step, a gentler "
          "--compress or a denser --graph brings them together");
    CHECK(check.verdict({evaluation(2, 0.45, 0.7175, 112)}, true).starts_with("apart: "));
    // One of 8 peers back late at chance, the others level with the average: 11 points.
    CHECK(check.verdict({evaluation(2, 0.87, 0.87 * 7 / 8 + 0.1 / 8, 3.0)}, true).empty());
    CHECK(check.verdict({evaluation(2, 0.80, 0.551, 3.0)}, true).empty());
    // Only the end counts: peers apart mid-run that came together are fine.
    CHECK(check.verdict({evaluation(1, 0.8, 0.2, 30), evaluation(2, 0.85, 0.84, 0.1)}, true).empty());
    CHECK(check.verdict({evaluation(2, 0.8778, 0.1493, 7.0)}, false).empty());
  }
  SECTION("a consensus distance that grew a thousandfold") {
    sim::DivergenceCheck check(2, 10);
    for (int s = 1; s <= 10; ++s) check.observe(1, metrics(s, 1.0, s < 6 ? 1.0 : 5.0));
    const std::vector<sim::Evaluation> curve = {evaluation(1, 0.7, 0.7, 0.02), evaluation(2, 0.7, 0.7, 0.01),
                                                evaluation(3, 0.7, 0.7, 30.0)};
    CHECK(check.verdict(curve, true) ==
          "diverged: the consensus distance grew from 0.01 to 30 (the averaged model's squared norm is 10) "
          "by 3 s "
          "(from step 6 on rank1, where its loss or partner distance began to rise)");
    // Zero distances (all-reduce) are no scale to grow from; peers that agreed to 1e-25
    // and then differ by 2e-6 have not diverged (the run that taught us this: gossip
    // after a kill, 4 MLP peers).
    CHECK(check.verdict({evaluation(1, 0.7, 0.7, 0.0), evaluation(2, 0.7, 0.7, 1e-9)}, true).empty());
    CHECK(check.verdict({evaluation(1, 0.9, 0.9, 8.27e-25), evaluation(2, 0.9, 0.9, 2.02e-6)}, true).empty());
  }
  SECTION("a consensus distance still rising at the end, past four times its low of the second half") {
    sim::DivergenceCheck check(8, 10);
    // The distances of D-PSGD with topk:1% at γ 0.1 behind a lossy link and a restart at
    // 1.5 epochs (docs/PERFORMANCE.md), every 0.375 epoch; LeNet's squared norm about 300.
    const auto curve_of = [](const std::vector<double>& distances) {
      return distance_curve(distances, 0.375);
    };
    CHECK(check.verdict(curve_of({5, 6.3, 6.1, 6.0, 9.2, 18.2, 34.2, 63.1}), true) ==
          "drifting: the consensus distance rose from 6 at 1.5 epochs to 63.1 at the end, and was still "
          "rising: the peers move apart; a smaller --consensus-step, a gentler --compress or a denser "
          "--graph keeps them together");
    // Bounded: a 2x rise (the same at γ 0.075: 3.96 to 7.85), a rise that turned back, a
    // rise from agreement to rounding (f32), a rise seen in too few evaluations.
    CHECK(check.verdict(curve_of({5, 6, 5, 3.96, 4.5, 5.8, 6.9, 7.85}), true).empty());
    CHECK(check.verdict(curve_of({5, 6, 5, 3, 9, 20, 25, 24}), true).empty());
    CHECK(check.verdict(curve_of({1e-3, 1e-4, 1e-5, 1e-6, 1e-5, 1e-4, 1e-3, 0.01}), true).empty());
    CHECK(check.verdict(curve_of({1, 40}), true).empty());
    // A jump at the final evaluation alone is no trend: gossip behind lossy links, where the
    // last peers trained alone after their neighbours had ended, went from agreement (0, a
    // sync) to 1.28 on the final checkpoints (4 MLP peers, tests/test_sim.cpp's link sweep).
    CHECK(check.verdict(curve_of({5, 4, 3, 2, 1, 0.5, 0, 1.28}), true).empty());
    CHECK(check.verdict(curve_of({5, 4, 3, 2, 1, 0.5, 0.4, 63.1}), true).empty());
    // From agreement (0) the growth is counted from the floor (1e-3 of 300): two rises past
    // four times it drift, two rises inside it do not.
    CHECK(check.verdict(curve_of({5, 4, 3, 2, 0, 0, 0.8, 1.28}), true).starts_with("drifting: "));
    CHECK(check.verdict(curve_of({5, 4, 3, 2, 0, 0, 0.5, 1.1}), true).empty());
    // Without the final evaluation nothing is said of the end.
    CHECK(check.verdict(curve_of({5, 6.3, 6.1, 6.0, 9.2, 18.2, 34.2, 63.1}), false).empty());
  }
  SECTION("a consensus distance still rising at the end, past a hundred times its low of the whole run") {
    sim::DivergenceCheck check(8, 10);
    // Every 0.1 epoch of 3, LeNet's squared norm about 300 (docs/PERFORMANCE.md, the
    // look-ahead). A look-ahead past its stability limit (κ = 1.25): 355-fold over the run,
    // 1.8-fold over its second half; it ended at 0.8240 where the bounded run ended at 0.8668.
    const auto curve_of = [](const std::vector<double>& distances) { return distance_curve(distances, 0.1); };
    const std::vector<double> runaway = {0.772, 5.63, 18.9, 29.0, 49.0, 63.5, 87.6, 99.6, 112, 114,
                                         121,   132,  139,  145,  148,  153,  158,  162,  167, 173,
                                         178,   183,  190,  197,  207,  216,  228,  242,  257, 274};
    CHECK(check.verdict(curve_of(runaway), true) ==
          "drifting: the consensus distance rose from 0.772 at 0.1 epochs to 274 at the end, and was still "
          "rising: the peers move apart; a smaller --consensus-step, a gentler --compress or a denser "
          "--graph keeps them together");
    // Bounded: topk:1% at γ 0.1 without the look-ahead, 23-fold from its first evaluation and
    // rising at the end; and the runaway turned back at its last evaluation.
    const std::vector<double> bounded = {0.585, 1.94, 2.87, 3.85, 4.86, 5.21, 5.79, 5.94, 6.14, 6.16,
                                         6.16,  6.27, 6.31, 6.34, 6.33, 6.35, 6.39, 6.44, 6.44, 6.55,
                                         6.75,  7.00, 7.35, 7.78, 8.34, 8.99, 9.82, 10.8, 12.0, 13.4};
    CHECK(check.verdict(curve_of(bounded), true).empty());
    std::vector<double> turned = runaway;
    turned.back() = 250;
    CHECK(check.verdict(curve_of(turned), true).empty());
  }
}

}  // namespace
}  // namespace hearsay
