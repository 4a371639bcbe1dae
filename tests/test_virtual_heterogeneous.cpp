// Gradient tracking, D², RelaySGD and quasi-global momentum in the virtual engine, on shards of
// different labels (dirichlet:0.1), under the faults their traits promise to survive: a
// peer killed mid-run and a lossy link. Each run ends ok, its fault fired, and it still
// trains (docs/PERFORMANCE.md has the LeNet figures at full size).
#include <catch2/catch.hpp>
#include <string>

#include "sim/invariants.hpp"
#include "virtual_sim_test_util.hpp"

using namespace hearsay;
using namespace hearsay::sim;

TEST_CASE(
    "virtual sim: tracking, d2 and quasi-global momentum train on non-IID shards through a kill and a "
    "lossy link",
    "[sim][virtual][chaos]") {
  for (const std::string kind : {"local", "quasi-global"})
    for (const std::string algo : {"tracking", "d2", "dpsgd"})
      for (const std::string faults : {"kill:3@0.5ep", "link:2:1gbit,1ms,loss=0.05"}) {
        if (algo == "dpsgd" && kind == "local") continue;  // D-PSGD's own tests cover it
        SimConfig cfg = testing::small_virtual_config("heterogeneous");
        cfg.graph = "ring";
        cfg.training.partition = "dirichlet:0.1";
        cfg.training.momentum = 0.9f;
        cfg.momentum_kind = kind;
        cfg.faults = faults;
        const RunResult r = testing::run_virtual(cfg, algo);
        INFO(algo << " with " << kind << " momentum, " << faults << ": " << r.status);
        CHECK(r.status == "ok");
        REQUIRE(r.fault_firings.size() == 1);
        CHECK(r.fault_firings[0].fired);
        REQUIRE(r.final_evaluation() != nullptr);
        // Synthetic classes: one epoch takes every algorithm here past 0.6 (chance 0.1), but
        // tracking with quasi-global momentum behind the lossy link (0.49; healthy 0.68):
        // what the lost messages leave in the trackers, the momentum carries on
        // (docs/PERFORMANCE.md). It still trains: four times chance.
        const bool weakest = algo == "tracking" && kind == "quasi-global" && faults.starts_with("link");
        CHECK(r.final_evaluation()->acc_avg_model > (weakest ? 0.4 : 0.6));
      }
}

TEST_CASE(
    "virtual sim: relaysgd trains on non-IID shards through a lossy link and a lost or restarted leaf, and "
    "fails naming a lost peer that cuts its tree",
    "[sim][virtual][chaos]") {
  // 4 peers on a ring: the tree is 2-1-0-3 (rank 0's neighbours, then rank 1's).
  const auto run = [](const std::string& faults) {
    SimConfig cfg = testing::small_virtual_config("relaysgd");
    cfg.graph = "ring";
    cfg.training.partition = "dirichlet:0.1";
    cfg.training.momentum = 0.9f;
    cfg.faults = faults;
    const RunResult r = testing::run_virtual(cfg, "relaysgd");
    INFO(faults << ": " << r.status);
    REQUIRE(r.fault_firings.size() == 1);
    CHECK(r.fault_firings[0].fired);
    for (const InvariantCheck& c : check_invariants(r, validate(cfg))) {
      INFO(c.name << ": " << c.detail);
      CHECK(c.held);
    }
    return r;
  };
  // A restarted leaf resumes behind the others and outlives its neighbour, which said bye.
  for (const std::string faults : {"link:2:1gbit,1ms,loss=0.05", "kill:3@0.5ep", "restart:3@0.5ep"}) {
    const RunResult r = run(faults);
    CHECK(r.status == "ok");
    REQUIRE(r.final_evaluation() != nullptr);
    // Chance is 0.1. A restart on these four shards costs every algorithm much of the run
    // (healthy / restarted: dpsgd 0.94 / 0.60, relaysgd 0.91 / 0.41, d2 0.27 restarted): the
    // restarted peer comes back with its checkpoint's model of its own two classes. On 8
    // LeNet peers the same restart costs relaysgd 2.4 points (docs/PERFORMANCE.md).
    CHECK(r.final_evaluation()->acc_avg_model > (faults.starts_with("restart") ? 0.3 : 0.6));
  }
  // rank1 has rank2 behind it: the first peer to fail is a neighbour of rank1, naming it.
  const RunResult cut = run("kill:1@0.5ep");
  CHECK_THAT(cut.status, Catch::Matchers::StartsWith("failed: rank") &&
                             Catch::Matchers::Contains("peer 'rank1'") &&
                             Catch::Matchers::Contains("nothing from this tree neighbour"));
}
