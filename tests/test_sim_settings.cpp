// The settings `hearsay sim` hands its peers reach them as given: each peer's "start"
// record shows what it trains with, and summary.json records it. The simulator once wrote
// the values with six decimals (--lr 2e-7 reached the peers as 0.000000, 2.5e-6 as
// 0.000003) while its summary showed the value given.
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "test_support.hpp"

using hearsay::testing::TempPath;

namespace {

nlohmann::json start_record(const std::filesystem::path& metrics) {
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    auto record = nlohmann::json::parse(line);
    if (record.value("type", "") == "start") return record;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("sim: the peers train with the learning rate and momentum as given, and the summary says so",
          "[sim][process]") {
  const std::string lr = GENERATE("2e-07", "2.5e-06");
  const std::string engine = GENERATE("process", "virtual");
  INFO("--lr " << lr << ", --engine " << engine);
  TempPath out;
  const auto r = hearsay::testing::run_hearsay({"sim", "--peers", "2", "--model", "mlp", "--data", "synthetic",
                                                "--algo", "gossip", "--epochs", "1", "--lr", lr, "--momentum",
                                                "0.95", "--engine", engine, "--out", out.str(), "--no-progress"});
  INFO(r.all());
  REQUIRE(r.status == 0);
  const auto summary = nlohmann::json::parse(std::ifstream(out.path() / "summary.json"));
  const auto& used = summary["runs"][0]["peer_settings"];
  // Written as the shortest text of the float each peer holds: the value given, exactly.
  CHECK(used["lr"].dump() == lr);
  CHECK(used["momentum"].dump() == "0.95");
  CHECK(summary["lr"].dump() == lr);
  if (engine == "process")
    for (const char* peer : {"peer0.jsonl", "peer1.jsonl"}) {
      INFO(peer);
      const auto start = start_record(out.path() / "gossip-0" / peer);
      REQUIRE(start.is_object());
      CHECK(start["settings"]["lr"].dump() == lr);
      CHECK(start["settings"]["momentum"].dump() == "0.95");
    }
  // Each peer's settings as a config file, which hearsay peer reads back to the same settings.
  const auto settings = out.path() / "gossip-0" / "peer1.toml";
  std::ifstream in(settings);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK_THAT(text, Catch::Contains("\nlr = " + lr + "\n") && Catch::Contains("\nrank = 1\n"));
  const auto again = hearsay::testing::run_hearsay({"peer", "--config", settings.string(), "--print-config"});
  INFO(again.all());
  CHECK(again.status == 0);
  CHECK(again.out == text);
}

TEST_CASE("sim: --epochs 0.37 trains 0.37 of an epoch, on every engine, and says so", "[sim][process]") {
  const std::string engine = GENERATE("process", "virtual");
  INFO("--engine " << engine);
  TempPath out;
  // dpsgd goes in lockstep: each peer trains its own 0.37 epochs, 35 of its 94 steps
  // (3,000 examples a peer in batches of 32).
  const auto r = hearsay::testing::run_hearsay({"sim", "--peers", "2", "--model", "mlp", "--data",
                                                "synthetic", "--algo", "dpsgd", "--epochs", "0.37",
                                                "--engine", engine, "--out", out.str(), "--no-progress"});
  INFO(r.all());
  REQUIRE(r.status == 0);
  const auto summary = nlohmann::json::parse(std::ifstream(out.path() / "summary.json"));
  CHECK(summary["epochs"].dump() == "0.37");
  const auto& run = summary["runs"][0];
  CHECK(run["status"] == "ok");
  CHECK(run["epochs"].dump() == "0.37");
  CHECK(run["peer_steps"] == nlohmann::json::array({35, 35}));
  if (engine == "process")
    CHECK(start_record(out.path() / "dpsgd-0" / "peer0.jsonl")["epochs"].dump() == "0.37");
}

TEST_CASE("sim: --run-timeout 0 never stops a run, and a negative one is refused", "[sim]") {
  TempPath out;
  const auto r = hearsay::testing::run_hearsay(
      {"sim", "--peers", "2", "--model", "mlp", "--data", "synthetic", "--algo", "gossip", "--epochs", "0.2",
       "--engine", "virtual", "--run-timeout", "0", "--out", out.str(), "--no-progress"});
  INFO(r.all());
  REQUIRE(r.status == 0);
  const auto summary = nlohmann::json::parse(std::ifstream(out.path() / "summary.json"));
  CHECK(summary["runs"][0]["status"] == "ok");
  TempPath refused;
  const auto bad =
      hearsay::testing::run_hearsay({"sim", "--peers", "2", "--model", "mlp", "--data", "synthetic",
                                     "--run-timeout", "-1", "--out", refused.str()});
  CHECK(bad.status == 2);
  CHECK_THAT(bad.all(), Catch::Contains("--run-timeout"));
}
