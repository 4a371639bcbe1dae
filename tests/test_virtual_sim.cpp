// `hearsay sim --engine virtual` (sim/virtual_run.hpp): the same algorithms in virtual
// time. Small MLP runs over synthetic data: their time is the modelled one, the same seed
// gives the same curves whatever the number of compute threads, a kill fails all-reduce
// naming the lost peer while gossip trains on, and the settings it cannot honour are
// refused before anything runs.
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "model/data/dataset.hpp"
#include "sim/sim_config.hpp"
#include "sim/virtual_run.hpp"
#include "virtual_sim_test_util.hpp"

using namespace hearsay;
using namespace hearsay::sim;

namespace {

SimConfig small_config(const std::string& name) { return testing::small_virtual_config(name); }

RunResult run(const SimConfig& cfg, const std::string& algo) { return testing::run_virtual(cfg, algo); }

std::vector<double> curve_values(const RunResult& r) {
  std::vector<double> v;
  for (const auto& e : r.curve)
    v.insert(v.end(), {e.time_s, e.acc_avg_model, e.consensus_distance, e.acc_mean_peer});
  return v;
}

}  // namespace

TEST_CASE("virtual sim: a run's time is the modelled step time plus the links', not the machine's",
          "[sim][virtual]") {
  const SimConfig cfg = small_config("time");
  const RunResult r = run(cfg, "allreduce");
  CHECK(r.status == "ok");
  CHECK(r.engine == "virtual");
  // 6000 examples over 4 peers at batch 32: 47 steps of 10 ms each, plus 47 ring
  // all-reduces of 2(n-1) = 6 messages of 1 ms latency each, and their bytes at 1 Gbit/s;
  // on this machine the run takes seconds of real time, whatever its load.
  CHECK(r.wall_s > 0.47 + 47 * 6 * 0.001);
  CHECK(r.wall_s < 1.5);
  CHECK(run(cfg, "allreduce").wall_s == r.wall_s);  // virtual time does not depend on the machine
  REQUIRE(r.final_evaluation() != nullptr);
  CHECK(r.final_evaluation()->acc_avg_model > 0.5);        // it learnt: synthetic classes are easy
  CHECK(r.final_evaluation()->consensus_distance == 0.0);  // all-reduce keeps the peers equal
  CHECK(r.curve.size() >= 4);
}

TEST_CASE("virtual sim: the same seed gives identical curves with 1 and 2 compute threads",
          "[sim][virtual][slow]") {
  for (const std::string algo : {"gossip", "dpsgd", "sgp"}) {
    INFO(algo);
    SimConfig one = small_config("threads1");
    one.threads = 1;
    SimConfig two = small_config("threads2");
    two.threads = 2;
    const RunResult a = run(one, algo);
    const RunResult b = run(two, algo);
    CHECK(a.status == "ok");
    CHECK(b.status == "ok");
    CHECK(curve_values(a) == curve_values(b));
    CHECK(a.wall_s == b.wall_s);
    CHECK(a.bytes_sent_per_peer == b.bytes_sent_per_peer);
  }
}

TEST_CASE("virtual sim: a killed peer fails all-reduce naming it, and gossip trains on", "[sim][virtual]") {
  SimConfig cfg = small_config("kill");
  cfg.faults = "kill:3@0.5ep";
  const RunResult allreduce = run(cfg, "allreduce");
  CHECK(allreduce.status.starts_with("failed"));
  CHECK_THAT(allreduce.status, Catch::Contains("rank3"));
  REQUIRE(allreduce.fault_firings.size() == 1);
  CHECK(allreduce.fault_firings[0].fired);

  const RunResult gossip = run(cfg, "gossip");
  CHECK(gossip.status == "ok");
  REQUIRE(gossip.fault_firings.size() == 1);
  CHECK(gossip.fault_firings[0].fired);
  CHECK(gossip.fault_firings[0].run_epochs == Approx(0.5).margin(0.05));
  REQUIRE(gossip.final_evaluation() != nullptr);
  CHECK(gossip.final_evaluation()->peers == 3);  // the dead peer is left out of the average
  CHECK(gossip.final_evaluation()->acc_avg_model > 0.5);
}

TEST_CASE("virtual sim: a restarted peer comes back from its last checkpoint and trains to the end",
          "[sim][virtual]") {
  SimConfig cfg = small_config("restart");
  cfg.faults = "restart:2@0.5ep";
  const RunResult r = run(cfg, "gossip");
  CHECK(r.status == "ok");
  REQUIRE(r.fault_firings.size() == 1);
  CHECK(r.fault_firings[0].fired);
  REQUIRE(r.final_evaluation() != nullptr);
  CHECK(r.final_evaluation()->peers == 4);  // back among the live peers
  CHECK(r.final_evaluation()->acc_avg_model > 0.5);
  // It redid the steps since its last checkpoint: the run trained more than one epoch.
  CHECK(r.curve.back().run_epochs > 1.0);
}

TEST_CASE("virtual sim: a slow peer stretches a synchronous run by its factor", "[sim][virtual]") {
  SimConfig cfg = small_config("slow");
  const double healthy = run(cfg, "allreduce").wall_s;
  cfg.faults = "slow:1:3x";
  const RunResult slow = run(cfg, "allreduce");
  CHECK(slow.status == "ok");
  // Every round waits for the slow peer: 47 steps of 30 ms instead of 10 ms, 20 ms more
  // each, less what of it the others' part of the ring overlaps (they send and sum their
  // chunks while it computes).
  CHECK(slow.wall_s - healthy > 47 * 0.015);
  CHECK(slow.wall_s - healthy < 47 * 0.020 + 1e-6);
}

TEST_CASE("virtual sim: what the engine cannot do is refused before a run", "[sim][virtual]") {
  SimConfig cfg = small_config("refused");
  cfg.step_time_dist = "lognormal:60ms,0.5";
  CHECK_THROWS_WITH(validate(cfg), Catch::Contains("give one of them"));
  cfg.step_time.clear();
  CHECK_NOTHROW(validate(cfg));
  cfg.engine = "process";
  CHECK_THROWS_WITH(validate(cfg), Catch::Contains("--engine virtual"));
}

TEST_CASE("virtual sim: --step-time-dist and the evaluated sample parse and draw as documented",
          "[sim][virtual]") {
  const StepTimeDist d = parse_step_time_dist("lognormal:60ms,0.5");
  CHECK(d.median == std::chrono::milliseconds(60));
  CHECK(d.sigma == 0.5);
  for (const char* bad :
       {"lognormal:60ms", "normal:60ms,0.5", "lognormal:0ms,0.5", "lognormal:60ms,x", "lognormal:60ms,-1"})
    CHECK_THROWS_WITH(parse_step_time_dist(bad), Catch::Contains("lognormal:MEDIAN,SIGMA"));
  CHECK(sampled_peers(8, 16, 1) == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
  const auto sample = sampled_peers(1024, 16, 7);
  CHECK(sample.size() == 16);
  CHECK(std::is_sorted(sample.begin(), sample.end()));
  CHECK(sample == sampled_peers(1024, 16, 7));
  CHECK(sample != sampled_peers(1024, 16, 8));
}

TEST_CASE("virtual sim: a partition in virtual time holds, heals, and is reported", "[sim][virtual]") {
  SimConfig cfg = small_config("partition");
  cfg.faults = "partition:0-1|2-3@0.2ep..0.6ep";
  const RunResult r = run(cfg, "gossip");
  CHECK(r.status == "ok");
  REQUIRE(r.fault_firings.size() == 1);
  CHECK(r.fault_firings[0].fired);
  REQUIRE(r.fault_firings[0].healed_s.has_value());
  CHECK(*r.fault_firings[0].healed_s > r.fault_firings[0].time_s);
  // While cut in two, the halves drift apart; after healing they mix again.
  double during = 0, after = 0;
  for (const auto& e : r.curve) {
    if (e.run_epochs > 0.3 && e.run_epochs < 0.6) during = std::max(during, e.consensus_distance);
    if (e.run_epochs > 0.9) after = e.consensus_distance;
  }
  CHECK(during > after);
}

TEST_CASE("virtual sim: every algorithm trains to the end in virtual time", "[sim][virtual][slow]") {
  for (const std::string algo : {"gossip", "dpsgd", "sgp", "adpsgd", "local", "allreduce"}) {
    INFO(algo);
    const RunResult r = run(small_config("every-" + algo), algo);
    CHECK(r.status == "ok");
    REQUIRE(r.final_evaluation() != nullptr);
    CHECK(r.final_evaluation()->peers == 4);
    CHECK(r.final_evaluation()->acc_avg_model > 0.5);
    CHECK(r.wall_s > 0.47);  // at least its 47 steps of 10 ms
    if (algo != "local") CHECK(r.bytes_sent_per_peer > 0);
  }
}

TEST_CASE(
    "virtual sim: stragglers drawn from --step-time-dist slow a synchronous run, the same way each time",
    "[sim][virtual]") {
  SimConfig cfg = small_config("dist");
  const double paced = run(cfg, "allreduce").wall_s;
  cfg.step_time.clear();
  cfg.step_time_dist = "lognormal:10ms,0.5";
  const RunResult a = run(cfg, "allreduce");
  CHECK(a.status == "ok");
  // Each round waits for the slowest of 4 draws around a median of 10 ms: longer than
  // 10 ms a step on average (for sigma 0.5 the expected maximum of 4 is about 16 ms).
  CHECK(a.wall_s > paced + 47 * 0.003);
  CHECK(run(cfg, "allreduce").wall_s == a.wall_s);  // the draws are seeded
}

TEST_CASE("virtual sim: a frozen peer takes no step and is not heard until it wakes", "[sim][virtual]") {
  SimConfig cfg = small_config("freeze");
  const RunResult healthy = run(cfg, "dpsgd");
  cfg.faults = "freeze:1@0.1s..0.3s";
  const RunResult gossip = run(cfg, "gossip");
  CHECK(gossip.status == "ok");
  REQUIRE(gossip.fault_firings.size() == 1);
  const FaultFiring& f = gossip.fault_firings[0];
  CHECK(f.fired);
  CHECK(f.time_s == Approx(0.1).margin(0.011));  // within the step in progress (10 ms)
  REQUIRE(f.healed_s);
  CHECK(*f.healed_s == Approx(0.3));
  // The others trained on (a global budget): rank 1 missed the 20 steps of 10 ms of the
  // freeze, less those the others lost to rounds with it that went unanswered.
  REQUIRE(gossip.peer_steps.size() == 4);
  CHECK(gossip.peer_steps[1] <= gossip.peer_steps[0] - 10);
  // D-PSGD's neighbours wait for it: the run is at least the freeze longer, and every
  // peer takes every step.
  const RunResult dpsgd = run(cfg, "dpsgd");
  CHECK(dpsgd.status == "ok");
  CHECK(dpsgd.wall_s >= healthy.wall_s + 0.19);
  CHECK(dpsgd.peer_steps == healthy.peer_steps);
  REQUIRE(dpsgd.final_evaluation() != nullptr);
  CHECK(dpsgd.final_evaluation()->acc_avg_model > 0.5);
}

TEST_CASE("virtual sim: a peer killed or restarted while frozen ends its freeze, and nothing hangs",
          "[sim][virtual]") {
  SimConfig cfg = small_config("freeze-kill");
  cfg.faults = "freeze:1@0.1s..0.4s;kill:1@0.2s;freeze:2@0.1s..0.4s;restart:2@0.2s";
  const RunResult r = run(cfg, "gossip");
  CHECK(r.status == "ok");  // no fiber left waiting for a thaw that never comes
  REQUIRE(r.fault_firings.size() == 4);
  for (const FaultFiring& f : r.fault_firings) CHECK(f.fired);
  REQUIRE(r.fault_firings[0].healed_s);
  CHECK(*r.fault_firings[0].healed_s == Approx(0.2));  // it died frozen
  REQUIRE(r.fault_firings[2].healed_s);
  CHECK(*r.fault_firings[2].healed_s == Approx(0.2));
  REQUIRE(r.final_evaluation() != nullptr);
  CHECK(r.final_evaluation()->peers == 3);  // the restarted one is back, the killed one not
}

TEST_CASE("virtual sim: a full disk fires and heals, and the peer trains on", "[sim][virtual]") {
  SimConfig cfg = small_config("disk-full");
  cfg.faults = "disk-full:1@0.1s..0.3s;disk-full:2@0.2s";
  const RunResult r = run(cfg, "gossip");
  CHECK(r.status == "ok");
  REQUIRE(r.fault_firings.size() == 2);
  CHECK(r.fault_firings[0].fired);
  REQUIRE(r.fault_firings[0].healed_s);
  CHECK(*r.fault_firings[0].healed_s == Approx(0.3));
  CHECK(r.fault_firings[1].fired);
  CHECK_FALSE(r.fault_firings[1].healed_s);  // full to the end
  REQUIRE(r.final_evaluation() != nullptr);
  CHECK(r.final_evaluation()->peers == 4);
}

TEST_CASE("virtual sim: each point's bytes are those sent by its step, also when a restarted peer lags",
          "[sim][virtual]") {
  // Exact-step points wait for the restarted peer; the others send on meanwhile, and the
  // point must not count what they sent after its step.
  SimConfig cfg = small_config("bytes");
  cfg.faults = "restart:2@0.5ep";
  cfg.target_acc = 0.3;
  const RunResult r = run(cfg, "dpsgd");
  CHECK(r.status == "ok");
  REQUIRE(r.curve.size() >= 3);
  for (std::size_t i = 1; i + 1 < r.curve.size(); ++i) {
    INFO("point " << i);
    CHECK(r.curve[i].bytes_per_peer > r.curve[i - 1].bytes_per_peer);
  }
  CHECK(r.curve.back().bytes_per_peer == Approx(r.bytes_sent_per_peer));
  REQUIRE(r.bytes_to_target_per_peer.has_value());
  CHECK(*r.bytes_to_target_per_peer > 0);
  CHECK(*r.bytes_to_target_per_peer <= r.bytes_sent_per_peer);
}

TEST_CASE("virtual sim: a run that diverged names the peer that diverged first", "[sim][virtual]") {
  // It named the last rank that diverged, whoever went first. Here several peers' losses
  // blow up at the same step, at the same time: the first of them by rank is named.
  for (const std::string algo : {"gossip", "dpsgd"}) {
    INFO(algo);
    SimConfig cfg = small_config("diverged-first");
    cfg.training.lr = 50;
    const RunResult r = run(cfg, algo);
    INFO(r.status);
    REQUIRE(r.status.starts_with("diverged: rank"));
    std::optional<std::size_t> first;  // the lowest rank of those that ended first (the others were stopped)
    for (std::size_t rank = 0; rank < r.peer_end_s.size(); ++rank)
      if (r.peer_end_s[rank] >= 0 && (!first || r.peer_end_s[rank] < r.peer_end_s[*first])) first = rank;
    REQUIRE(first);
    CHECK(r.status.starts_with("diverged: rank" + std::to_string(*first) + ": "));
    CHECK(std::count(r.peer_end_s.begin(), r.peer_end_s.end(), r.peer_end_s[*first]) > 1);  // a tie
  }
}

TEST_CASE("virtual sim: a run ends when a peer diverges, not at its budget", "[sim][virtual]") {
  // The status says `diverged` whatever the others do next. The peers never mix (H 1000)
  // and each one's loss blows up at its 4th step; rank 3 steps 10 times as slowly, and its
  // 4th step is far later than the others': it took it, and the run lasted 0.4 s.
  SimConfig cfg = small_config("diverged-stops");
  cfg.training.lr = 4;
  cfg.faults = "slow:3:10x";
  cfg.peer_args = {"--gossip-every", "1000"};
  const RunResult r = run(cfg, "dpsgd");
  INFO(r.status);
  REQUIRE(r.status.starts_with("diverged: rank"));
  REQUIRE(r.peer_steps.size() == 4);
  CHECK(r.peer_steps[0] == 3);
  CHECK(r.peer_steps[3] < 3);  // stopped when the first one diverged
  CHECK(r.wall_s < 0.2);       // and the run with it
}
