// Compressed D-PSGD (CHOCO, choco.hpp) in the virtual engine, with its look-ahead and
// without it (--no-lookahead), healthy and through a lossy link and a restart at once: each
// run ends ok, its faults fired, the run's invariants hold, and it trains
// (docs/PERFORMANCE.md has the LeNet figures at full size).
#include <catch2/catch.hpp>
#include <string>

#include "sim/invariants.hpp"
#include "virtual_sim_test_util.hpp"

using namespace hearsay;
using namespace hearsay::sim;

TEST_CASE(
    "virtual sim: compressed dpsgd with and without the look-ahead trains through a lossy link and a "
    "restart",
    "[sim][virtual][chaos]") {
  for (const std::string compress : {"topk:5%", "sign"})
    for (const bool paper : {false, true})
      for (const std::string faults : {"", "link:2:1gbit,1ms,loss=0.05;restart:3@0.5ep"}) {
        SimConfig cfg = testing::small_virtual_config("choco");
        cfg.algos = {"dpsgd"};
        cfg.graph = "exp";
        cfg.training.momentum = 0.9f;
        cfg.compress = compress;
        cfg.no_lookahead = paper;
        cfg.faults = faults;
        const RunResult r = testing::run_virtual(cfg, "dpsgd");
        INFO(compress << (paper ? ", no look-ahead" : "") << ", faults '" << faults << "': " << r.status);
        CHECK(r.no_lookahead == paper);
        CHECK(r.status == "ok");
        for (const FaultFiring& f : r.fault_firings) CHECK(f.fired);
        for (const InvariantCheck& c : check_invariants(r, validate(cfg))) {
          INFO(c.name << ": " << c.detail);
          CHECK(c.held);
        }
        // Each evaluation at its own time: a point the restarted peer skipped once held every
        // later one back to the run's end, all stamped with its time.
        std::size_t later = 0;
        for (std::size_t i = 1; i < r.curve.size(); ++i) {
          CHECK(r.curve[i].time_s >= r.curve[i - 1].time_s);
          later += r.curve[i].time_s > r.curve[i - 1].time_s;
        }
        INFO(later << " of " << r.curve.size() << " evaluations later than the one before");
        CHECK(later + 3 >= r.curve.size());
        REQUIRE(r.final_evaluation() != nullptr);
        // Synthetic classes on IID shards, chance 0.1: every run here ended at 0.94 to 0.97,
        // the faulty ones level with the healthy.
        CHECK(r.final_evaluation()->acc_avg_model > 0.8);
      }
}
