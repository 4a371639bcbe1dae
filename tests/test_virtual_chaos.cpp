// What chaos schedules found in the virtual engine, each checked on a small run (4 MLP
// peers, synthetic data, 10 ms steps) or on the failing soak seed's own schedule: a lockstep
// peer restarted late catches up instead of training on alone, push-sum's weight survives
// links that duplicate and reorder its shares, a freeze and a partition, and peers cut off
// by a partition come back into the mix (D-PSGD, local SGD, AD-PSGD).
#include <catch2/catch.hpp>
#include <cmath>
#include <string>

#include "sim/invariants.hpp"
#include "sim/sim_config.hpp"
#include "sim/virtual_run.hpp"
#include "virtual_sim_test_util.hpp"

using namespace hearsay;
using namespace hearsay::sim;

namespace {

// The soak's runs (scripts/soak): 8 MLP peers, 3 epochs, 50 ms steps, no link, evaluated at
// the end only, as hearsay sim's defaults; a failing soak seed's schedule reruns on it.
SimConfig soak_config(const std::string& name, std::uint64_t seed) {
  SimConfig cfg = testing::small_virtual_config(name);
  cfg.peers = 8;
  cfg.training.epochs = 3;
  cfg.training.seed = seed;
  cfg.training.lr = 0.1f;
  cfg.link.clear();
  cfg.eval_every = 0;
  cfg.step_time = "50ms";
  return cfg;
}

// Soak seed 30's schedule: rank 3 cut off alone while the others go at a slow peer's pace.
constexpr const char* kSeed30Faults =
    "slow:2:3x@0.35ep; partition:3|0,1,2,4,5,6,7@0.39ep..1.24ep; freeze:0@1.03ep..1.19ep; kill:0@1.48ep; "
    "freeze:2@1.63ep..2.17ep; restart:0@1.88ep";

// A soak seed's schedule (or part of it) rerun on one algorithm: the averaged model's
// accuracy at the end of a run that ended ok.
double soak_accuracy(const std::string& name, std::uint64_t seed, const std::string& faults,
                     const std::string& algo) {
  SimConfig cfg = soak_config(name, seed);
  cfg.faults = faults;
  const RunResult r = testing::run_virtual(cfg, algo);
  CHECK(r.status == "ok");
  REQUIRE(r.final_evaluation() != nullptr);
  return r.final_evaluation()->acc_avg_model;
}

}  // namespace

TEST_CASE("virtual sim: a lockstep peer restarted late from an old checkpoint ends with the others",
          "[sim][virtual][chaos]") {
  // Before: rank 2 came back at its checkpoint's step and trained the steps it had lost
  // after its neighbours ended, alone, drifting from them (seed 21 of the soak: sgp's
  // averaged model 23 points under its healthy twin). Now it takes a live neighbour's
  // state and step, as a late joiner does.
  SimConfig cfg = testing::small_virtual_config("late-restart");
  cfg.faults = "kill:2@0.2ep;restart:2@0.6ep";
  for (const char* algo : {"dpsgd", "sgp", "local"}) {
    const RunResult r = testing::run_virtual(cfg, algo);
    INFO(algo << ": ended at " << r.peer_end_s[0] << ", " << r.peer_end_s[1] << ", " << r.peer_end_s[2]
              << ", " << r.peer_end_s[3] << " s");
    CHECK(r.status == "ok");
    REQUIRE(r.peer_end_s.size() == 4);
    REQUIRE(r.peer_steps.size() == 4);
    CHECK(r.peer_steps[2] == r.peer_steps[0]);
    // It did not redo the steps the others took while it was away: the run trained under
    // one epoch (about 0.87: rank 2 missed 25 of its 47 steps), where redoing them from its
    // checkpoint (at step 10 at most) took it over 1. (At its planned steps it is not ahead
    // of the run, so it ends there even if its last round missed a neighbour.)
    REQUIRE(!r.curve.empty());
    CHECK(r.curve.back().run_epochs < 0.95);
    // And it ended with the others, give or take the rounds its ended neighbours cost it.
    CHECK(std::abs(r.peer_end_s[2] - r.peer_end_s[0]) < 0.5);
    REQUIRE(r.final_evaluation() != nullptr);
    CHECK(r.final_evaluation()->peers == 4);
    CHECK(r.final_evaluation()->acc_avg_model > 0.8);
  }
}

TEST_CASE("virtual sim: a gossip peer restarted late from an old checkpoint goes on from a neighbour's state",
          "[sim][virtual][chaos]") {
  // Soak seed 19: rank 6, frozen early and killed at 1.15 epochs, comes back at 2.01 from
  // a checkpoint of its 31st step while the others are near their 89th. Before, it went on
  // from that stale model and the run ended before gossip had pulled it back: consensus
  // distance 13.3 at the end, the averaged model at 0.958 against 0.993 without faults.
  // Now it takes a live peer's state and step (behind_the_run).
  SimConfig cfg = soak_config("late-restart-gossip", 19);
  cfg.faults =
      "freeze:6@0.16ep..0.55ep; slow:5:3x@1.01ep; kill:6@1.15ep; kill:4@1.48ep; "
      "freeze:5@1.83ep..2.15ep; restart:6@2.01ep";
  const RunResult r = testing::run_virtual(cfg, "gossip");
  CHECK(r.status == "ok");
  REQUIRE(r.peer_steps.size() == 8);
  CHECK(r.peer_steps[6] > 60);  // it went on from the run's step, not its checkpoint's 31st
  REQUIRE(!r.curve.empty());
  CHECK(r.curve.back().consensus_distance < 0.1);
  REQUIRE(r.final_evaluation() != nullptr);
  CHECK(r.final_evaluation()->acc_avg_model > 0.98);
}

TEST_CASE(
    "virtual sim: push-sum's weight is conserved through duplicated and reordered shares, a freeze "
    "and a partition",
    "[sim][virtual][chaos]") {
  SimConfig cfg = testing::small_virtual_config("push-sum-weight");
  cfg.faults =
      "link:1:1gbit,1ms,dup=0.3,reorder=0.3; link:3:1gbit,1ms,loss=0.05,dup=0.1; freeze:2@0.1s..0.2s; "
      "partition:0,1|2,3@0.25s..0.35s";
  const auto faults = validate(cfg);
  RunResult r = testing::run_virtual(cfg, "sgp");
  CHECK(r.status == "ok");
  REQUIRE(r.push_sum_weight);
  // Shares are split and added in double: the network keeps its 4, to rounding.
  CHECK(*r.push_sum_weight == Approx(4.0).epsilon(1e-9));
  for (const InvariantCheck& c : check_invariants(r, faults)) {
    INFO(c.name << ": " << c.detail);
    CHECK(c.held);
    if (c.name == "weight") CHECK(c.checked);
  }
  // The other algorithms take duplicated and late messages too, and train on.
  for (const char* algo : {"gossip", "dpsgd", "adpsgd"}) {
    INFO(algo);
    r = testing::run_virtual(cfg, algo);
    CHECK(r.status == "ok");
    CHECK_FALSE(r.push_sum_weight);  // not push-sum
    REQUIRE(r.final_evaluation() != nullptr);
    CHECK(r.final_evaluation()->acc_avg_model > 0.8);
  }
}

TEST_CASE("virtual sim: a peer that died took its push-sum weight with it, and no more",
          "[sim][virtual][chaos]") {
  SimConfig cfg = testing::small_virtual_config("push-sum-death");
  cfg.faults = "kill:3@0.3ep";
  const RunResult r = testing::run_virtual(cfg, "sgp");
  CHECK(r.status == "ok");
  REQUIRE(r.push_sum_weight);
  CHECK(*r.push_sum_weight > 2.0);  // the dead peer's own, about 1, and shares it never applied
  CHECK(*r.push_sum_weight < 4.0);
}

TEST_CASE(
    "virtual sim: a push-sum peer killed behind a lossy link, and restarted, brings back one peer's weight",
    "[sim][virtual][chaos]") {
  // Soak seed 81's rank 7 applied shares whose acknowledgements its lossy link lost, and
  // died. Its restarted self took their re-sends for new shares and applied them again:
  // the network's weight ended at 9.17 for 8 peers and one restart (at most 9). Killed
  // only, the run counted the same shares as still on their way (8.17, at most 8).
  const bool restart = GENERATE(false, true);
  INFO((restart ? "killed and restarted" : "killed"));
  SimConfig cfg = soak_config("push-sum-restart", 81);
  cfg.faults =
      std::string("link:7:100mbit,5ms,loss=0.05; kill:7@0.92ep") + (restart ? "; restart:7@1.09ep" : "");
  const auto faults = validate(cfg);
  const RunResult r = testing::run_virtual(cfg, "sgp");
  CHECK(r.status == "ok");
  REQUIRE(r.push_sum_weight);
  // The dead life's weight (its own and what it applied) is gone; a restart brings 1.
  CHECK(*r.push_sum_weight < (restart ? 9.0 : 8.0));
  CHECK(*r.push_sum_weight > (restart ? 7.0 : 6.0));
  for (const InvariantCheck& c : check_invariants(r, faults)) {
    INFO(c.name << ": " << c.detail);
    CHECK(c.held);
  }
}

TEST_CASE("virtual sim: a local SGD peer whose slow uplink let it run ahead waits for the others",
          "[sim][virtual][chaos]") {
  // Soak seed 46's rank 4, restarted behind a 100 Mbit/s uplink (7 MB to each of 7 peers a
  // round): it heard the others at once while they waited for it, ran ahead, and its pings
  // queued behind its own parameters, so it left every neighbour out as silent and trained
  // alone: 172 steps against the others' 57 to 62 of 72 (the simulator's budget, counting
  // its extra steps, ended them), 0.930 against 0.996 healthy. The parameters the others
  // send it, of rounds it has passed, show they are alive: it waits for them.
  SimConfig cfg = soak_config("lockstep-ahead", 46);
  cfg.faults = "link:4:100mbit,5ms; kill:4@0.16ep; slow:7:5x@0.36ep; restart:4@0.42ep";
  const RunResult r = testing::run_virtual(cfg, "local");
  CHECK(r.status == "ok");
  REQUIRE(r.peer_steps.size() == 8);
  for (std::size_t p = 0; p < r.peer_steps.size(); ++p) {
    INFO("rank " << p);
    // 72 planned; a peer well ahead of the others at its end trains on a few (RunBudget).
    CHECK(r.peer_steps[p] >= 72);
    CHECK(r.peer_steps[p] <= 86);
  }
  REQUIRE(r.final_evaluation() != nullptr);
  CHECK(r.final_evaluation()->acc_avg_model > 0.98);
}

TEST_CASE("virtual sim: a lockstep peer's steps past its planned ones do not end the peers behind it",
          "[sim][virtual][chaos]") {
  // Soak seed 46, sgp: rank 3 ran ahead and trained on past its 72 steps while the others
  // were behind (RunBudget). The simulator's global budget counted its extra steps and
  // ended rank 7, five times slower, at 36 of its 72 (0.959 against 0.998 healthy); and
  // the peers that had ended said no bye, so rank 3 stayed "ahead" of them to the end.
  SimConfig cfg = soak_config("lockstep-budget", 46);
  cfg.faults =
      "link:4:100mbit,5ms,loss=0.05; kill:4@0.16ep; slow:7:5x@0.36ep; restart:4@0.42ep; "
      "freeze:1@0.89ep..1.39ep; partition:2,4,5,7|0,1,3,6@1.06ep..1.85ep";
  const RunResult r = testing::run_virtual(cfg, "sgp");
  CHECK(r.status == "ok");
  REQUIRE(r.peer_steps.size() == 8);
  CHECK(r.peer_steps[7] == 72);
  for (const std::int64_t steps : r.peer_steps) CHECK(steps <= 2 * 72);  // RunBudget::kLockstepLoops
  REQUIRE(r.final_evaluation() != nullptr);
  CHECK(r.final_evaluation()->acc_avg_model > 0.965);
}

TEST_CASE("virtual sim: a link that turns slow for a while fires, slows its peer's rounds, and heals",
          "[sim][virtual][chaos]") {
  SimConfig cfg = testing::small_virtual_config("timed-link");
  const RunResult healthy = testing::run_virtual(cfg, "dpsgd");
  cfg.faults = "link:1:1gbit,40ms@0.1s..0.3s";
  const auto timed_faults = validate(cfg);
  const RunResult timed = testing::run_virtual(cfg, "dpsgd");
  CHECK(timed.status == "ok");
  REQUIRE(timed.fault_firings.size() == 1);
  const FaultFiring& f = timed.fault_firings[0];
  CHECK(f.fired);
  CHECK(f.time_s == Approx(0.1).margin(0.05));  // at the first step that ends after it
  REQUIRE(f.healed_s);
  CHECK(*f.healed_s == Approx(0.3).margin(0.05));
  // D-PSGD's neighbours of rank 1 wait 40 ms more each round while it holds (about 0.2 s
  // of rounds), and no longer once it healed: the same link for the whole run costs 40 ms
  // in each of the 47 rounds.
  cfg.faults = "link:1:1gbit,40ms";
  const RunResult whole = testing::run_virtual(cfg, "dpsgd");
  INFO("healthy " << healthy.wall_s << " s, timed " << timed.wall_s << " s, whole run " << whole.wall_s
                  << " s");
  CHECK(timed.wall_s > healthy.wall_s + 0.1);
  CHECK(timed.wall_s < whole.wall_s - 0.5);
  for (const InvariantCheck& c : check_invariants(timed, timed_faults)) {
    INFO(c.name << ": " << c.detail);
    CHECK(c.held);
  }
}

TEST_CASE("virtual sim: a passive AD-PSGD peer its active neighbours left out reaches out and rejoins",
          "[sim][virtual][chaos][adpsgd]") {
  // Soak seed 9: rank 1 (passive; its active neighbours on the exp graph are 0 and 2) is
  // killed at 0.38 epochs and restarted at 1.2. Its neighbours had left it out of their
  // choices for ten expiry horizons when it broke, longer than the run, and a passive peer
  // starts no exchange that would show it is back: it trained alone to the end (consensus
  // distance 0.88 at the end). Now, starved of requests, it asks a neighbour itself.
  SimConfig cfg = soak_config("adpsgd-reach-out", 9);
  cfg.faults = "kill:1@0.38ep;restart:1@1.2ep";
  const RunResult r = testing::run_virtual(cfg, "adpsgd");
  CHECK(r.status == "ok");
  REQUIRE(!r.curve.empty());
  CHECK(r.curve.back().consensus_distance < 0.1);
  REQUIRE(r.final_evaluation() != nullptr);
  CHECK(r.final_evaluation()->acc_avg_model > 0.98);
}

TEST_CASE("virtual sim: a frozen neighbour costs a lockstep round at most half the round timeout",
          "[sim][virtual][chaos]") {
  // Soak seed 1 (local SGD): rounds that had waited for a neighbour held up elsewhere taught
  // a wait of the whole round timeout, so the round never probed; a frozen neighbour was
  // then waited for 2 s in every round of its freeze and never went quiet, and the run took
  // 28 virtual seconds instead of 4. Now two probes fit in a round (round_wait is at most a
  // quarter of the timeout) and the frozen peer is quiet after two rounds.
  SimConfig cfg = soak_config("frozen-lockstep", 1);
  cfg.faults =
      "freeze:6@0.20ep..0.57ep; kill:2@0.28ep; restart:2@0.56ep; partition:0,1,2,5,6,7|3,4@0.64ep..1.40ep; "
      "freeze:5@1.06ep..1.59ep";
  const RunResult r = testing::run_virtual(cfg, "local");
  CHECK(r.status == "ok");
  // 72 steps of 50 ms are 3.6 s; the freezes, the restart and the partition cost a few
  // rounds their probes (7.9 s now, 26 s before).
  CHECK(r.wall_s < 12.0);
}

TEST_CASE("virtual sim: a lockstep peer a partition raced ahead trains on until the others are back",
          "[sim][virtual][chaos]") {
  // Soak seed 30 (local SGD): rank 3, cut off alone while the others went at the pace of a
  // peer three times slower, took its 72 steps at full speed and ended long before the
  // partition healed, its model trained on its own shard (consensus distance 22 at the end,
  // 0.927 against 0.989). Under a global budget it now trains on while it is well ahead of
  // the run, and mixes with the others again once the partition heals.
  SimConfig cfg = soak_config("raced-ahead", 30);
  cfg.faults = kSeed30Faults;
  const RunResult r = testing::run_virtual(cfg, "local");
  CHECK(r.status == "ok");
  REQUIRE(r.peer_steps.size() == 8);
  CHECK(r.peer_steps[3] > r.peer_steps[1]);  // past its planned steps: the run was behind it
  REQUIRE(!r.curve.empty());
  CHECK(r.curve.back().consensus_distance < 5);
  REQUIRE(r.final_evaluation() != nullptr);
  CHECK(r.final_evaluation()->acc_avg_model > 0.95);
}

TEST_CASE("virtual sim: a D-PSGD peer back from a partition alone takes its neighbours' model",
          "[sim][virtual][chaos]") {
  // Soak seed 30, D-PSGD: rank 3, cut off alone while the others went at a slow peer's
  // pace, trained 66 of its 72 steps on its own shard. Mixed back in at a third, its model
  // pulled the run's average away, which the rest of the run never made up: 0.948 at the
  // end against 0.990 without faults, consensus reached. Now, the first round it is back,
  // it takes its neighbours' values and they leave its out (ParamsExchange::kApartAfter):
  // 0.973.
  CHECK(soak_accuracy("apart-dpsgd", 30, kSeed30Faults, "dpsgd") > 0.965);
}

TEST_CASE("virtual sim: AD-PSGD's passive peers reaching out across a partition give up in a few steps",
          "[sim][virtual][chaos][adpsgd]") {
  // Soak seed 20: a partition split the even (active) peers from the odd (passive) ones for
  // 0.3 of 3 epochs. Each passive peer, starved, reached out to a neighbour across it; its
  // request, to a partner it had never timed, expired after the round timeout (2 s, half
  // the run), and kept its snapshot open, busy to every active peer that asked, that long:
  // the two sides mixed only among themselves until 2 epochs (consensus distance 41) and
  // ended at 0.934 against 0.987 without faults. Now the request expires after a few of
  // its steps' compute: 0.988.
  CHECK(soak_accuracy("adpsgd-reach-out-expiry", 20, "partition:0,2,4,6|1,3,5,7@0.35ep..0.66ep", "adpsgd") >
        0.975);
}
