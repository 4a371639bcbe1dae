// Fair runs (peer/run_budget.hpp): every peer of a ranked run takes the same steps per
// epoch whatever its shard (EpochOrder), peers estimate the run's progress from the steps
// their messages carry (ProgressEstimate), a global budget ends every peer together with
// fast peers taking more steps, the schedule follows the run's progress, and runs are
// compared with all-reduce's final accuracy (compare_with_allreduce).
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "gossip/network/emulation/control_file.hpp"
#include "gossip/network/transport/progress_estimate.hpp"
#include "gossip/network/wire/header.hpp"
#include "model/data/dataset.hpp"
#include "model/data/epoch_order.hpp"
#include "peer/run_budget.hpp"
#include "peer_config_test_util.hpp"
#include "sim/sim_config.hpp"
#include "sim/virtual_run.hpp"
#include "virtual_sim_test_util.hpp"

using namespace hearsay;
using namespace std::chrono_literals;
using transport::ProgressEstimate;

namespace {

bool is_permutation_of_range(std::vector<std::int64_t> v, std::int64_t n) {
  std::sort(v.begin(), v.end());
  std::vector<std::int64_t> expected(static_cast<std::size_t>(n));
  std::iota(expected.begin(), expected.end(), 0);
  return v == expected;
}

// The stream of epochs 1..epochs, one after the other.
std::vector<std::int64_t> stream(EpochOrder& order, std::int64_t epochs) {
  std::vector<std::int64_t> all;
  for (std::int64_t e = 1; e <= epochs; ++e) {
    const auto& o = order.of(e);
    all.insert(all.end(), o.begin(), o.end());
  }
  return all;
}

}  // namespace

TEST_CASE("an epoch of the shard's size is one shuffle more than the last, as before", "[fair]") {
  EpochOrder order(100, 7);
  std::vector<std::int64_t> manual(100);
  std::iota(manual.begin(), manual.end(), 0);
  Rng rng(7);
  for (std::int64_t e = 1; e <= 3; ++e) {
    rng.shuffle(manual.begin(), manual.end());
    CHECK(order.of(e) == manual);
  }
}

TEST_CASE("equal epochs wrap a small shard and cut a large one, and a jump replays the same order",
          "[fair]") {
  for (const std::int64_t per_epoch : {std::int64_t{7}, std::int64_t{100}, std::int64_t{250}}) {
    INFO("per epoch " << per_epoch);
    EpochOrder order(40, 3, per_epoch);
    const auto all = stream(order, 6);
    REQUIRE(all.size() == static_cast<std::size_t>(6 * per_epoch));
    // Cut into passes of the shard's size, the stream is one permutation after another:
    // every example once per pass, whatever the epochs' size.
    for (std::size_t pass = 0; (pass + 1) * 40 <= all.size(); ++pass)
      CHECK(is_permutation_of_range({all.begin() + static_cast<std::ptrdiff_t>(pass * 40),
                                     all.begin() + static_cast<std::ptrdiff_t>((pass + 1) * 40)},
                                    40));
    EpochOrder jumped(40, 3, per_epoch);
    const auto fifth = jumped.of(5);  // a resume at epoch 5
    CHECK(std::equal(fifth.begin(), fifth.end(), all.begin() + 4 * per_epoch));
    CHECK(jumped.of(6) == std::vector<std::int64_t>(all.begin() + 5 * per_epoch, all.end()));
  }
  CHECK(examples_per_epoch(60000, 52, 8) == 7500);
  CHECK(examples_per_epoch(60001, 52, 8) == 7501);
  CHECK(examples_per_epoch(60000, 52, 0) == 52);  // no fixed ranks: the shard's own
  CHECK_THROWS(EpochOrder(0, 1));
}

TEST_CASE("the progress estimate extrapolates what it heard, stops at a bye, and assumes its own pace",
          "[fair]") {
  const auto t0 = ProgressEstimate::Clock::time_point{} + 1000s;
  ProgressEstimate p(4);
  p.set_own(100);
  // Nobody heard from yet: the three others are taken to be where this peer is.
  CHECK(p.total_steps(t0) == Approx(400));
  p.heard("fast", 300, t0);
  p.heard("fast", 330, t0 + 1s);  // 30 steps a second
  p.heard("slow", 50, t0 + 1s);
  // fast: 330 + 30/s x 2 s; slow: no rate yet, 50; the fourth, unheard: our 100.
  CHECK(p.total_steps(t0 + 3s) == Approx(100 + 390 + 50 + 100));
  // A peer that fell silent is extrapolated for at most 20 of its steps, but at least the
  // shortest horizon (2 s: 60 steps at 30 a second) and at most the longest (10 s).
  CHECK(p.total_steps(t0 + 1s + ProgressEstimate::kHorizon + 100s) ==
        Approx(100 + 330 + 30.0 * ProgressEstimate::kMinHorizon.count() + 50 + 100));
  {
    ProgressEstimate q(2);
    q.heard("crawling", 10, t0);
    q.heard("crawling", 11, t0 + 1s);  // a step a second: 20 steps take 20 s, past the 10 s cap
    CHECK(q.total_steps(t0 + 100s) == Approx(11 + ProgressEstimate::kHorizon.count()));
  }
  CHECK_FALSE(p.has_left("fast"));
  p.left("fast");  // it said bye: it takes no more steps
  CHECK(p.has_left("fast"));
  CHECK_FALSE(p.has_left("slow"));
  CHECK_FALSE(p.has_left("never heard"));
  CHECK(p.total_steps(t0 + 3s) == Approx(100 + 330 + 50 + 100));
  p.heard("slow", 40, t0 + 2s);  // an older count, reordered: ignored
  CHECK(p.total_steps(t0 + 2s) == Approx(100 + 330 + 50 + 100));
  // A message it sent before its bye, still on the way, does not bring it back; one from
  // after a restart that trained on does. (An ended virtual peer's messages arrived after
  // its bye and kept a lockstep peer ahead of it training on.)
  p.heard("fast", 330, t0 + 4s);
  REQUIRE(p.median_other(t0 + 4s));
  CHECK(*p.median_other(t0 + 4s) == Approx(50));  // "slow" only: "fast" is still gone
  CHECK(p.has_left("fast"));
  p.heard("fast", 331, t0 + 5s);
  CHECK_FALSE(p.has_left("fast"));
  CHECK(*p.median_other(t0 + 5s) == Approx(331));  // back: the upper of the two
  // A bye with its count: a lower count heard after it does not bring it back either.
  p.left("slow", 60);
  p.heard("slow", 55, t0 + 5s);
  CHECK(*p.median_other(t0 + 5s) == Approx(331));  // "fast" only
}

// Two peers of a world of two, one three times faster, each telling the other its count
// every tick as their messages would: under a global budget both end within a tick of each
// other at the same learning rate; each on its own budget, the slow one would still be at a
// high rate when the fast one is done.
TEST_CASE("a global budget ends a fast and a slow peer together, at the same learning rate", "[fair]") {
  BudgetConfig global;
  global.kind = "global";
  constexpr std::int64_t kStepsPerEpoch = 300, kEpochs = 1;
  auto fast_progress = std::make_shared<ProgressEstimate>(2),
       slow_progress = std::make_shared<ProgressEstimate>(2);
  RunBudget fast(global, false, false, kEpochs, kStepsPerEpoch, fast_progress, false);
  RunBudget slow(global, false, false, kEpochs, kStepsPerEpoch, slow_progress, false);
  CHECK(fast.loop_epochs() == 2);  // alone it could take the whole budget
  BudgetedSchedule fast_lr(parse_lr_schedule("cosine", 0.1f, fast.planned_steps()), fast);
  BudgetedSchedule slow_lr(parse_lr_schedule("cosine", 0.1f, slow.planned_steps()), slow);
  const auto t0 = ProgressEstimate::Clock::time_point{} + 1000s;
  fast.started(t0);
  slow.started(t0);
  std::int64_t fast_steps = 0, slow_steps = 0, tick = 0, fast_end = -1, slow_end = -1;
  while ((fast_end < 0 || slow_end < 0) && tick < 10000) {
    ++tick;
    const auto now = t0 + tick * 10ms;
    if (fast_end < 0) {
      fast_steps += 3;
      fast.after_step(fast_steps, now);
      slow_progress->heard("fast", static_cast<std::uint64_t>(fast_steps), now);
      if (fast.ended()) fast_end = tick;
    }
    if (slow_end < 0) {
      slow_steps += 1;
      slow.after_step(slow_steps, now);
      fast_progress->heard("slow", static_cast<std::uint64_t>(slow_steps), now);
      if (slow.ended()) slow_end = tick;
    }
  }
  REQUIRE(fast_end > 0);
  REQUIRE(slow_end > 0);
  CHECK(std::abs(fast_end - slow_end) <= 1);
  CHECK(fast.why() == RunBudget::End::global);
  // Together they trained the budget (2 peers x 300 steps), the fast one three times more.
  CHECK(fast_steps + slow_steps == Approx(600).margin(4));
  CHECK(fast_steps == Approx(3 * slow_steps).margin(3));
  // At the end both are at the end of the cosine: within 10% of the peak rate of each other.
  CHECK(std::abs(fast_lr.at(fast_steps) - slow_lr.at(slow_steps)) <= 0.01f);
  // Each on its own steps, the slow peer would be halfway through its decay (half the peak).
  const auto per_peer = parse_lr_schedule("cosine", 0.1f, kStepsPerEpoch);
  CHECK(per_peer->at(slow_steps) > 0.04f);
}

TEST_CASE("a ranked peer's steps weigh by its shard over the mean shard, unless --average-over peers",
          "[fair]") {
  PeerConfig cfg;
  cfg.network.rank = 1;
  cfg.network.world = 4;
  for (const std::string algo : {"dpsgd", "allreduce", "gossip"}) {
    cfg.mixing.algo = algo;
    cfg.mixing.average_over = "examples";
    // 300 of 600 examples over 4 peers: twice the mean shard of 150.
    CHECK(plan_run(cfg, "rank1", 300, 600, false).shard_share == 2.0);
    CHECK(plan_run(cfg, "rank1", 15, 600, false).shard_share == 0.1);
    CHECK(plan_run(cfg, "rank1", 150, 600, false).shard_share == 1.0);
    cfg.mixing.average_over = "peers";
    CHECK(plan_run(cfg, "rank1", 300, 600, false).shard_share == 1.0);
  }
  PeerConfig unranked;  // a peer without ranks knows no mean shard
  CHECK(plan_run(unranked, "p", 300, 600, false).shard_share == 1.0);
}

TEST_CASE("a time budget ends training once that long has passed, and all-reduce keeps its epochs",
          "[fair]") {
  BudgetConfig cfg;
  cfg.kind = "global";
  cfg.time = 2s;
  auto progress = std::make_shared<ProgressEstimate>(4);
  const auto t0 = ProgressEstimate::Clock::time_point{} + 1000s;
  RunBudget ring(cfg, /*lockstep=*/true, /*per_peer_only=*/true, 3, 100, progress, false);
  CHECK_FALSE(ring.global());  // every peer must take the same steps
  CHECK(ring.loop_epochs() == 3);
  ring.started(t0);
  ring.after_step(10, t0 + 1s);
  CHECK_FALSE(ring.ended());
  CHECK(ring.schedule_step(10) == 10);
  ring.after_step(20, t0 + 2s);
  CHECK(ring.why() == RunBudget::End::time);
}

TEST_CASE("a lockstep peer ends at its own steps with the others, and trains on when far ahead of them",
          "[fair]") {
  BudgetConfig cfg;
  cfg.kind = "global";
  const auto t0 = ProgressEstimate::Clock::time_point{} + 1000s;
  // With the others at its step, it ends at its planned steps, as they do.
  auto together = std::make_shared<ProgressEstimate>(4);
  RunBudget with(cfg, /*lockstep=*/true, /*per_peer_only=*/false, 1, 100, together, false);
  CHECK(with.global());
  CHECK(with.loop_epochs() == 2);  // past its epochs only to wait for peers behind it (kLockstepLoops)
  with.started(t0);
  for (const char* other : {"b", "c", "d"}) together->heard(other, 99, t0 + 990ms);
  with.after_step(99, t0 + 990ms);
  CHECK_FALSE(with.ended());
  CHECK(with.schedule_step(99) == 99);  // its own step: lockstep runs repeat exactly
  with.after_step(100, t0 + 1s);
  CHECK(with.why() == RunBudget::End::epochs);

  // Far ahead of every peer it hears from (a partition raced it ahead), it trains on until
  // the run's budget is spent, at the end of its schedule.
  auto apart = std::make_shared<ProgressEstimate>(4);
  RunBudget alone(cfg, true, false, 1, 100, apart, false);
  alone.started(t0);
  for (const char* other : {"b", "c", "d"}) apart->heard(other, 30, t0);  // one count each: no rate
  alone.after_step(100, t0 + 1s);
  CHECK_FALSE(alone.ended());
  CHECK(alone.schedule_step(101) == 101);
  alone.after_step(309, t0 + 3s);
  CHECK_FALSE(alone.ended());
  alone.after_step(310, t0 + 3s);  // (310 + 3 x 30) / 4 = 100: the budget is spent
  CHECK(alone.why() == RunBudget::End::global);

  // Heard from nobody, it has nothing to be ahead of: it ends at its planned steps (in a
  // simulator, which ends global budgets itself, by this rule alone).
  RunBudget unheard(cfg, true, false, 1, 100, std::make_shared<ProgressEstimate>(4), true);
  unheard.started(t0);
  unheard.after_step(100, t0 + 1s);
  CHECK(unheard.why() == RunBudget::End::epochs);
}

TEST_CASE("a fraction of an epoch ends at its planned step, and whole epochs end with the loop", "[fair]") {
  BudgetConfig cfg;  // per-peer
  const auto t0 = ProgressEstimate::Clock::time_point{} + 1000s;
  RunBudget part(cfg, /*lockstep=*/false, /*per_peer_only=*/false, 0.37, 100, nullptr, false);
  CHECK(part.loop_epochs() == 1);
  CHECK(part.planned_steps() == 37);
  part.started(t0);
  part.after_step(36, t0);
  CHECK_FALSE(part.ended());
  part.after_step(37, t0);
  CHECK(part.why() == RunBudget::End::epochs);
  RunBudget more(cfg, false, false, 2.5, 10, nullptr, false);
  CHECK(more.loop_epochs() == 3);
  CHECK(more.planned_steps() == 25);
  // Whole epochs: the training loop ends after its last epoch, as it always did.
  RunBudget whole(cfg, false, false, 2, 100, nullptr, false);
  CHECK(whole.loop_epochs() == 2);
  whole.started(t0);
  whole.after_step(200, t0);
  CHECK_FALSE(whole.ended());
  // A sliver still trains a step.
  CHECK(RunBudget(cfg, false, false, 0.001, 100, nullptr, false).planned_steps() == 1);
}

TEST_CASE("every message can carry its sender's steps, and a control file can say stop", "[fair]") {
  wire::Header h;
  h.type = wire::MessageType::ping;
  h.sender = "a";
  h.run_id = "r";
  h.fingerprint = "f";
  h.trained = 12345;
  const auto said = wire::decode_header(wire::encode_header(h));
  REQUIRE(said.header);
  CHECK(said.header->trained == 12345);
  h.trained = 0;  // not said: absent, read back as 0
  const auto unsaid = wire::decode_header(wire::encode_header(h));
  REQUIRE(unsaid.header);
  CHECK(unsaid.header->trained == 0);

  const auto control = emulation::parse_peer_control("hold\nstop\n");
  CHECK(control.stop);
  CHECK(emulation::parse_peer_control(emulation::to_text(control)) == control);
  CHECK_THROWS_WITH(emulation::parse_peer_control("stop now"), Catch::Contains("'stop' takes nothing"));
}

TEST_CASE("runs are compared with the all-reduce run of their repeat", "[fair]") {
  auto run = [](std::string algo, int repeat, double wall, std::vector<std::pair<double, double>> points) {
    sim::RunResult r;
    r.algo = std::move(algo);
    r.repeat = repeat;
    r.wall_s = wall;
    r.status = "ok";
    for (auto [t, acc] : points) {
      sim::Evaluation e;
      e.time_s = t;
      e.acc_avg_model = acc;
      r.curve.push_back(e);
    }
    return r;
  };
  std::vector<sim::RunResult> runs = {run("allreduce", 0, 100, {{50, 0.80}, {100, 0.87}}),
                                      run("gossip", 0, 60, {{20, 0.80}, {40, 0.866}, {60, 0.87}}),
                                      run("sgp", 0, 120, {{50, 0.70}, {110, 0.86}, {120, 0.861}}),
                                      run("gossip", 1, 60, {{20, 0.80}})};
  sim::compare_with_allreduce(runs);
  CHECK(runs[0].time_to_reference_s == Approx(100));
  CHECK(runs[1].time_to_reference_s == Approx(40));     // 0.866 is within 0.5 point of 0.87
  CHECK(runs[1].acc_at_reference_end == Approx(0.87));  // it ended first: its final accuracy
  CHECK_FALSE(runs[2].time_to_reference_s);             // 0.861 is not
  CHECK(runs[2].acc_at_reference_end == Approx(0.70));  // its last evaluation by 100 s
  CHECK_FALSE(runs[3].time_to_reference_s);             // repeat 1 has no all-reduce run
  CHECK_FALSE(runs[3].acc_at_reference_end);
}

using sim::testing::run_virtual;

namespace {

sim::SimConfig fair_config(const std::string& name) {
  return sim::testing::small_virtual_config("fair-" + name);
}

}  // namespace

TEST_CASE("virtual sim: with very unequal shards every peer takes the same steps and all-reduce ends ok",
          "[fair][virtual]") {
  sim::SimConfig cfg = fair_config("dirichlet");
  cfg.training.partition = "dirichlet:0.1";
  const sim::RunResult r = run_virtual(cfg, "allreduce");
  CHECK(r.status == "ok");
  REQUIRE(r.shard_examples.size() == 4);
  const auto [smallest, largest] = std::minmax_element(r.shard_examples.begin(), r.shard_examples.end());
  CHECK(*largest > 3 * *smallest);  // unequal enough to have ended the run early before
  // 6000 synthetic examples over 4 peers at batch 32: 47 steps each, whatever the shard.
  CHECK(r.peer_steps == std::vector<std::int64_t>(4, 47));
}

TEST_CASE("virtual sim: a global budget ends a run with a slow peer together, fast peers taking more steps",
          "[fair][virtual]") {
  sim::SimConfig cfg = fair_config("budget");
  cfg.faults = "slow:1:3x";
  const sim::RunResult global = run_virtual(cfg, "gossip");
  CHECK(global.status == "ok");
  REQUIRE(global.peer_steps.size() == 4);
  const std::int64_t total =
      std::accumulate(global.peer_steps.begin(), global.peer_steps.end(), std::int64_t{0});
  // The budget: 6000 examples at batch 32, one step more per peer at most (the step in
  // progress when it ran out).
  CHECK(total * 32 >= 6000);
  CHECK(total <= 6000 / 32 + 1 + 4);
  CHECK(global.peer_steps[0] > 2 * global.peer_steps[1]);  // the slow one took about a third
  // Every peer ended within one step of the slow peer (30 ms) of the others.
  const auto [first, last] = std::minmax_element(global.peer_end_s.begin(), global.peer_end_s.end());
  CHECK(*first >= 0);
  CHECK(*last - *first <= 0.030 + 1e-9);
  // Their schedules followed the run's progress, told by their messages: all end at the
  // cosine's end, the slow one too (on its own steps, 19 of 47, it would be at 2/3 of --lr).
  for (const double lr : global.peer_final_lr) CHECK(lr <= 0.1 * cfg.training.lr);

  cfg.budget = "per-peer";  // each peer its own epoch: the run lasts as long as the slow peer
  const sim::RunResult per_peer = run_virtual(cfg, "gossip");
  CHECK(per_peer.status == "ok");
  CHECK(per_peer.peer_steps == std::vector<std::int64_t>(4, 47));
  // Alone at the end, the slow peer's 47 steps of 30 ms; together, a quarter of the budget
  // goes at 10 ms a step on three peers: the global run is over in well under the time.
  CHECK(per_peer.wall_s > 1.5 * global.wall_s);
  CHECK(per_peer.wall_s > 47 * 0.030);
}

TEST_CASE("peer config: --average-over takes examples or peers, on the command line and in the file",
          "[peer-config]") {
  CHECK(peer_config_test::parse_peer(peer_config_test::with_base({})).mixing.average_over == "examples");
  CHECK(peer_config_test::parse_peer(peer_config_test::with_base({"--average-over", "peers"}))
            .mixing.average_over == "peers");
  peer_config_test::TomlFile file("[mixing]\naverage-over = \"peers\"\n");
  CHECK(peer_config_test::parse_peer(peer_config_test::with_base({"--config", file.str()}))
            .mixing.average_over == "peers");
  std::string refused;
  try {
    peer_config_test::parse_peer(peer_config_test::with_base({"--average-over", "shards"}));
  } catch (const std::exception& e) {
    refused = e.what();
  }
  CHECK_THAT(refused, Catch::Matchers::Contains("average-over") && Catch::Matchers::Contains("shards"));
}
