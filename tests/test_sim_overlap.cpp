// Faults that overlap, in the process engine: what no single fault shows.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "test_support.hpp"

using Catch::Matchers::Contains;
using hearsay::testing::read_file;
using hearsay::testing::TempPath;

TEST_CASE(
    "sim: a D-PSGD peer restarted behind a partition trains on instead of waiting for the ranks across it",
    "[sim][slow]") {
  // Rank 1 restarts 1.2 epochs in, while a partition (0.5 to 2.5 epochs, about 9 s of 100 ms
  // steps) cuts it off from ranks 2 and 3, which its seed (rank 0) has declared dead by then
  // (dead after 2 s of silence). It waited for them "to join" and failed after its join
  // timeout (3 s here, 60 s by default).
  TempPath out;
  const auto r = hearsay::testing::run_hearsay({"sim",
                                                "--peers",
                                                "4",
                                                "--algo",
                                                "dpsgd",
                                                "--model",
                                                "mlp",
                                                "--data",
                                                "synthetic",
                                                "--epochs",
                                                "3",
                                                "--step-time",
                                                "100ms",
                                                "--faults",
                                                "partition:0-1|2-3@0.5ep..2.5ep;restart:1@1.2ep",
                                                "--peer-arg=--join-timeout=3s",
                                                "--peer-arg=--heartbeat=200ms",
                                                "--peer-arg=--suspect-after=1s",
                                                "--peer-arg=--dead-after=2s",
                                                "--out",
                                                out.str(),
                                                "--no-progress"});
  INFO(r.all());
  CHECK(r.status == 0);
  const auto run = nlohmann::json::parse(read_file(out.path() / "summary.json"))["runs"][0];
  INFO(run.dump());
  CHECK(run["status"] == "ok");
  for (const auto& check : run["invariants"]) CHECK(check["held"] == true);
  CHECK(run["final_acc_avg_model"].get<double>() > 0.9);
  CHECK_THAT(read_file(out.path() / "dpsgd-0" / "peer1.log"), Contains("resumed into a run under way"));
}
