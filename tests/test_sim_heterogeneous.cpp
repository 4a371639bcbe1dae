// Gradient tracking, D² and quasi-global momentum as peer processes (the process engine),
// on non-IID shards with a peer killed half-way: the same peer code as the virtual engine
// runs (test_virtual_heterogeneous.cpp), here over ZeroMQ.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_support.hpp"

using namespace hearsay;
using namespace hearsay::testing;

namespace {

// Runs `hearsay sim` over 4 MLP peers on dirichlet:0.1 shards of synthetic data, ring, one
// epoch, rank 3 killed half-way, with `extra` flags; checks every run ended ok past `bound`
// with its fault fired, and returns the summary.
nlohmann::json run_killed(const TempPath& out, std::vector<std::string> extra, double bound) {
  std::vector<std::string> args{
      "sim",          "--peers", "4",       "--model",      "mlp",         "--data",        "synthetic",
      "--epochs",     "1",       "--graph", "ring",         "--partition", "dirichlet:0.1", "--faults",
      "kill:3@0.5ep", "--out",   out.str(), "--no-progress"};
  args.insert(args.end(), extra.begin(), extra.end());
  const auto r = run_hearsay(args);
  INFO(r.all());
  CHECK(r.status == 0);
  auto summary = nlohmann::json::parse(read_file(out.path() / "summary.json"));
  for (const auto& run : summary["runs"]) {
    INFO(run.dump());
    CHECK(run["status"] == "ok");
    CHECK(run["faults"][0]["fired"] == true);
    CHECK(run["final_acc_avg_model"].get<double>() > bound);
  }
  return summary;
}

}  // namespace

TEST_CASE("sim: tracking and d2 peer processes train on non-IID shards through a kill", "[sim][process]") {
  // A quarter of the data gone half-way: D-PSGD ends near 0.73 here, tracking and D² near
  // it (chance 0.1).
  TempPath out;
  const auto summary = run_killed(out, {"--algo", "tracking,d2"}, 0.5);
  CHECK(summary["runs"].size() == 2);
}

TEST_CASE("sim: quasi-global momentum reaches every peer process and trains through a kill",
          "[sim][process]") {
  TempPath out;
  const auto summary = run_killed(out, {"--algo", "dpsgd,d2", "--momentum-kind", "quasi-global"}, 0.5);
  CHECK(summary["momentum_kind"] == "quasi-global");
  // What tells this sweep from another (bench/rank.py groups runs by them).
  CHECK(summary["partition"] == "dirichlet:0.1");
  CHECK(summary["graph"] == "ring");
  CHECK(summary["runs"].size() == 2);
  CHECK_THAT(read_file(out.path() / "d2-0" / "peer0.toml"),
             Catch::Matchers::Contains("momentum-kind = \"quasi-global\""));
}

TEST_CASE("sim: relaysgd peer processes fail naming a killed peer that cuts their tree", "[sim][process]") {
  // 4 MLP peers on a ring (tree 2-1-0-3): rank 1 has rank 2 behind it. Its neighbours stop
  // hearing the models behind it and fail, naming it; the others follow.
  TempPath out;
  const auto r = run_hearsay(
      {"sim",          "--peers", "4",        "--model", "mlp",         "--data",        "synthetic",
       "--epochs",     "1",       "--graph",  "ring",    "--partition", "dirichlet:0.1", "--faults",
       "kill:1@0.5ep", "--algo",  "relaysgd", "--out",   out.str(),     "--no-progress"});
  INFO(r.all());
  CHECK(r.status == 1);
  const auto summary = nlohmann::json::parse(read_file(out.path() / "summary.json"));
  const auto& run = summary["runs"][0];
  INFO(run.dump());
  CHECK(run["faults"][0]["fired"] == true);
  const std::string status = run["status"];
  CHECK_THAT(status, Catch::Matchers::StartsWith("failed: rank") && Catch::Matchers::Contains("'rank1'"));
}
