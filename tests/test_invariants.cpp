// The invariants a chaos run is held to (sim/invariants.hpp), each shown to hold on a run
// that kept it and to be violated, with the reason, on one that did not.
#include <catch2/catch.hpp>
#include <limits>
#include <string>
#include <utility>

#include "sim/invariants.hpp"
#include "sim/sim_run.hpp"

using Catch::Matchers::Contains;
using namespace hearsay::sim;

namespace {

const std::vector<Fault> kSchedule = parse_faults("kill:3@1ep; freeze:2@0.5ep..0.8ep");

// A run of `algo` that survived kSchedule: both faults fired, ok, two finite evaluations.
RunResult survived(const std::string& algo) {
  RunResult r;
  r.algo = algo;
  r.wall_s = 20;
  Evaluation e;
  e.time_s = 10;
  e.acc_avg_model = 0.8;
  e.loss_avg_model = 0.5;
  r.curve = {e, e};
  r.status = "ok";
  FaultLog log(kSchedule);
  log.fired(0, 8, 1.0);
  log.fired(1, 4, 0.5);
  log.healed(1, 6);
  r.fault_firings = log.firings();
  return r;
}

std::string violated(const RunResult& r, const std::string& name) {
  for (const auto& c : check_invariants(r, kSchedule))
    if (c.name == name) return c.held ? std::string("held") : c.detail;
  FAIL("no invariant " << name);
  return {};
}

}  // namespace

TEST_CASE("invariants: a run that survived its schedule holds every one", "[chaos]") {
  const auto checks = check_invariants(survived("gossip"), kSchedule);
  REQUIRE(checks.size() == 6);
  for (const auto& c : checks) {
    INFO(c.name << ": " << c.detail);
    CHECK(c.held);
  }
  CHECK_FALSE(checks.back().checked);  // weight: not push-sum
  RunResult r = survived("gossip");
  r.invariants = checks;
  CHECK(first_violation(r).empty());
}

TEST_CASE("invariants: each is violated by what it is there to catch, and says why", "[chaos]") {
  RunResult hung = survived("dpsgd");
  hung.status = "timeout after 3600 s (still running: rank2)";
  CHECK_THAT(violated(hung, "ends"), Contains("it was stopped: timeout"));
  RunResult stuck = survived("dpsgd");
  stuck.status = "failed: 2 fiber(s) never ended, the first 'rank2/train'";
  CHECK_THAT(violated(stuck, "ends"), Contains("never ended"));

  RunResult nan = survived("sgp");
  nan.curve.back().loss_avg_model = std::numeric_limits<double>::quiet_NaN();
  CHECK_THAT(violated(nan, "finite"), Contains("has a loss of nan"));
  RunResult inf = survived("sgp");
  inf.status = "diverged: rank1: the loss became inf at step 40";
  CHECK_THAT(violated(inf, "finite"), Contains("the loss became inf"));

  RunResult silent = survived("gossip");
  silent.fault_firings[0].fired = false;  // not fired, and the status does not say so
  CHECK_THAT(violated(silent, "faults"), Contains("kill:3@1ep did not fire, and the status does not say so"));
  silent.status = "ok (kill:3@1ep never fired: the run ended at 12.3 s (0.80 epochs))";
  CHECK(violated(silent, "faults") == "held");
  RunResult missing = survived("gossip");
  missing.fault_firings.pop_back();
  CHECK_THAT(violated(missing, "faults"), Contains("2 faults scheduled, 1 reported"));
  RunResult late = survived("gossip");
  late.fault_firings[0].time_s = 60;
  CHECK_THAT(violated(late, "faults"), Contains("outside the run of"));
  RunResult backwards = survived("gossip");
  backwards.fault_firings[1].healed_s = 3;
  CHECK_THAT(violated(backwards, "faults"), Contains("healed before it fired"));

  RunResult failed = survived("gossip");
  failed.status = "failed: rank0 exit 1: waited for rank3 to join";
  CHECK_THAT(violated(failed, "status"), Contains("gossip must train on, but failed: rank0"));
  RunResult allreduce = survived("allreduce");  // cannot survive a lost peer, and says which
  allreduce.status = "failed: rank0: all-reduce round 12 cannot finish: peer rank3 is not answering";
  CHECK(violated(allreduce, "status") == "held");
  allreduce.status = "failed: the ring broke";
  CHECK_THAT(violated(allreduce, "status"), Contains("without naming the peer"));
  RunResult diverged = survived("sgp");
  diverged.status = "diverged: rank6 from step 20 (at step 31: loss 9.2)";
  CHECK(violated(diverged, "status") == "held");
  // Statuses that are not ok but true reports of the end, when they say how far apart.
  const std::pair<std::string, std::string> reports[] = {
      {"apart",
       "apart: the peers' own models end at a mean accuracy of 0.1493 and their average at 0.8778 "
       "(consensus distance 7): the peers hold no common model"},
      {"drifting",
       "drifting: the consensus distance rose from 1.5 at 1.5 epochs to 36.4 at the end, and was "
       "still rising: the peers move apart; ..."}};
  for (const auto& [kind, text] : reports) {
    INFO(kind);
    RunResult r = survived("dpsgd");
    r.status = text;
    CHECK(violated(r, "status") == "held");
    r.status = kind + ": somehow";
    CHECK_THAT(violated(r, "status"), Contains(kind + ", but not how far"));
  }
  RunResult interrupted = survived("sgp");
  interrupted.status = "interrupted";
  CHECK_THAT(violated(interrupted, "status"), Contains("ended 'interrupted'"));

  RunResult lost = survived("dpsgd");
  lost.checkpoint_problems = {"rank4 finished, but its checkpoint does not load: truncated"};
  CHECK_THAT(violated(lost, "checkpoints"), Contains("rank4 finished"));
  lost.invariants = check_invariants(lost, kSchedule);
  CHECK(first_violation(lost) ==
        "checkpoints: dpsgd run 0: rank4 finished, but its checkpoint does not load: truncated");
}

TEST_CASE("invariants: push-sum's weight is conserved without deaths, and bounded with them", "[chaos]") {
  // kSchedule's kill fired: the weight may have gone down (the dead peer took its own),
  // never up, and never to nothing.
  RunResult r = survived("sgp");
  r.peers = 8;
  r.push_sum_weight = 7.2;
  CHECK(violated(r, "weight") == "held");
  r.push_sum_weight = 8.5;  // made out of nothing: a duplicated share applied twice
  CHECK_THAT(violated(r, "weight"), Contains("8.5") && Contains("0 restarts"));
  r.push_sum_weight = 0;
  CHECK_THAT(violated(r, "weight"), Contains("0.000000"));
  // Without a death it is exactly the number of peers, to rounding.
  const std::vector<Fault> no_deaths = parse_faults("freeze:2@0.5ep..0.8ep; link:1:1gbit,1ms,dup=0.1");
  RunResult healthy = survived("sgp");
  healthy.peers = 8;
  FaultLog log(no_deaths);
  log.fired(0, 4, 0.5);
  log.healed(0, 6);
  log.fired(1, 0, 0);
  healthy.fault_firings = log.firings();
  const auto weight_of = [&](const RunResult& run) {
    for (const auto& c : check_invariants(run, no_deaths))
      if (c.name == "weight") return c;
    FAIL("no weight invariant");
    return InvariantCheck{};
  };
  healthy.push_sum_weight = 8.0 + 1e-9;
  CHECK(weight_of(healthy).held);
  healthy.push_sum_weight = 7.9;  // a share lost for good
  CHECK_FALSE(weight_of(healthy).held);
  CHECK_THAT(weight_of(healthy).detail, Contains("no peer died"));
}
