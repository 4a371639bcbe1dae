// The freeze fault (freeze:P@T..T2): a peer's process stopped with SIGSTOP and woken with
// SIGCONT, as a VM migration or a swap storm does to a real peer, and what the others and
// the peer itself make of it.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "test_support.hpp"

using Catch::Matchers::Contains;
using hearsay::testing::read_file;
using hearsay::testing::TempPath;

namespace {

// The lines of `log` that mention `what`, to show with a failure.
std::string lines_with(const std::string& log, const std::string& what) {
  std::string out;
  std::size_t start = 0;
  while (start < log.size()) {
    const std::size_t end = std::min(log.find('\n', start), log.size());
    const std::string line = log.substr(start, end - start);
    if (line.find(what) != std::string::npos) out += line + "\n";
    start = end + 1;
  }
  return out;
}

}  // namespace

TEST_CASE("sim: a peer frozen past its partners' dead-after wakes, rejoins, and corrupts nobody",
          "[sim][slow]") {
  // Heartbeats every 200 ms, dead after 2 s of silence: the 3 s freeze of rank 2 outlasts
  // it, so its partners declare it dead while it is stopped. It wakes 3 s into a run of
  // about 7 s (141 steps of 50 ms), with the others still training.
  TempPath out;
  const auto r = hearsay::testing::run_hearsay({"sim",
                                                "--peers",
                                                "4",
                                                "--algo",
                                                "gossip,dpsgd,sgp",
                                                "--model",
                                                "mlp",
                                                "--data",
                                                "synthetic",
                                                "--epochs",
                                                "3",
                                                "--step-time",
                                                "50ms",
                                                "--faults",
                                                "freeze:2@1s..4s",
                                                "--peer-arg=--heartbeat=200ms",
                                                "--peer-arg=--suspect-after=1s",
                                                "--peer-arg=--dead-after=2s",
                                                "--out",
                                                out.str(),
                                                "--no-progress"});
  INFO(r.all());
  CHECK(r.status == 0);
  const auto summary = nlohmann::json::parse(read_file(out.path() / "summary.json"));
  REQUIRE(summary["runs"].size() == 3);
  for (const auto& run : summary["runs"]) {
    const std::string algo = run["algo"];
    INFO(run.dump());
    CHECK(run["status"] == "ok");
    REQUIRE(run["faults"].size() == 1);
    const auto& freeze = run["faults"][0];
    CHECK(freeze["kind"] == "freeze");
    CHECK(freeze["fired"] == true);
    // About 3 s; the simulator fires and heals at its looks, which a busy machine delays.
    CHECK(freeze["healed_s"].get<double>() - freeze["time_s"].get<double>() >= 2.0);
    const std::string frozen = read_file(out.path() / (algo + "-0") / "peer2.log");
    const std::string partner = read_file(out.path() / (algo + "-0") / "peer0.log");
    INFO("rank2:\n" << lines_with(frozen, "member") << "rank0:\n" << lines_with(partner, "rank2"));
    // Its partners gave it up, and took it back when it spoke again.
    CHECK_THAT(partner, Contains("member 'rank2' died") && Contains("member 'rank2' revived"));
    // It knew the silence was its own, and did not declare the living dead (it declared
    // all three dead a heartbeat after it woke, before Membership forgave its own pause).
    CHECK_THAT(frozen, Contains("this process did not run for"));
    CHECK(lines_with(frozen, "' died").empty());
    // It mixed again: the peers end together (consensus distance near 0), and the averaged
    // model is as good as the peers.
    CHECK(run["consensus_distance"].get<double>() < 1e-3);
    CHECK(run["final_acc_avg_model"].get<double>() > 0.9);
    CHECK(run["final_acc_avg_model"].get<double>() >= run["final_acc_mean_peer"].get<double>() - 0.01);
  }
}
