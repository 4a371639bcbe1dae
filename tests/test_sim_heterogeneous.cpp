// Gradient tracking, D² and quasi-global momentum as peer processes (the process engine),
// on non-IID shards with a peer killed half-way: the same peer code as the virtual engine
// runs (test_virtual_heterogeneous.cpp), here over ZeroMQ.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "test_support.hpp"

using namespace hearsay;
using namespace hearsay::testing;

TEST_CASE(
    "sim: tracking and d2 peer processes train on non-IID shards through a kill, with quasi-global "
    "momentum",
    "[sim][process]") {
  TempPath out;
  const auto r = hearsay::testing::run_hearsay(
      {"sim",           "--peers",  "4",           "--model",         "mlp",          "--data",
       "synthetic",     "--epochs", "1",           "--graph",         "ring",         "--partition",
       "dirichlet:0.1", "--algo",   "tracking,d2", "--momentum-kind", "quasi-global", "--faults",
       "kill:3@0.5ep",  "--out",    out.str(),     "--no-progress"});
  INFO(r.all());
  CHECK(r.status == 0);
  const auto summary = nlohmann::json::parse(read_file(out.path() / "summary.json"));
  CHECK(summary["momentum_kind"] == "quasi-global");
  REQUIRE(summary["runs"].size() == 2);
  for (const auto& run : summary["runs"]) {
    INFO(run.dump());
    CHECK(run["status"] == "ok");
    CHECK(run["faults"][0]["fired"] == true);
    // Synthetic classes, one epoch, a quarter of the data gone half-way: tracking with
    // quasi-global momentum ended at 0.53 here, D² at 0.83 (chance 0.1).
    CHECK(run["final_acc_avg_model"].get<double>() > 0.3);
  }
  // Each peer was told: its flags say so.
  CHECK_THAT(read_file(out.path() / "tracking-0" / "peer0.toml"), Catch::Matchers::Contains("quasi-global"));
}
