// Faults in the process engine that the chaos harness brought in: a restart behind a
// partition (overlapping faults), and a full disk.
#include <catch2/catch.hpp>
#include <cstdlib>
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
  // Four epochs, not three: the two halves train apart for two epochs, and averaging them
  // when the partition heals costs accuracy until a few more steps mix it back. Healed
  // half an epoch before the end, with the cosine schedule's rate near zero, the
  // averaged model ended anywhere from 0.87 to 0.99 (7 runs); with 1.5 epochs left, 0.995
  // to 0.997 (8 runs).
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
                                                "4",
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

TEST_CASE("sim: a peer whose disk fills trains on, says each checkpoint failed, and keeps a loadable one",
          "[sim][slow]") {
  // From 0.3 to 2 epochs (about 1.5 s to 10 s of 100 ms steps) rank 1 may write only a few
  // hundred KB more to any file (RLIMIT_FSIZE): its checkpoints (1.9 MB) fail, every second.
  TempPath out;
  const auto r = hearsay::testing::run_hearsay(
      {"sim", "--peers", "4", "--algo", "gossip", "--model", "mlp", "--data", "synthetic", "--epochs", "3",
       "--step-time", "100ms", "--faults", "disk-full:1@0.3ep..2ep", "--out", out.str(), "--no-progress"});
  INFO(r.all());
  CHECK(r.status == 0);
  const auto run = nlohmann::json::parse(read_file(out.path() / "summary.json"))["runs"][0];
  INFO(run.dump());
  CHECK(run["status"] == "ok");
  CHECK(run["faults"][0]["fired"] == true);
  CHECK(run["faults"][0]["healed_s"].is_number());
  for (const auto& check : run["invariants"]) CHECK(check["held"] == true);
  const auto dir = out.path() / "gossip-0";
  // Its log says so, with the cause; its metrics (and /metrics, the same counters) count it.
  CHECK_THAT(read_file(dir / "peer1.log"),
             Contains("could not write the periodic checkpoint (the previous one stays)") &&
                 Contains("File too large"));
  const std::string metrics = read_file(dir / "peer1.jsonl");
  const auto final_at = metrics.rfind("\"type\":\"final\"");
  REQUIRE(final_at != std::string::npos);
  const auto final_line = nlohmann::json::parse(metrics.substr(
      metrics.rfind('\n', final_at) + 1, metrics.find('\n', final_at) - metrics.rfind('\n', final_at) - 1));
  CHECK(final_line["checkpoint_failures"].get<int>() >= 3);
  CHECK(final_line["checkpoints"].get<int>() >= 2);  // before the disk filled, and after
  // The watch read every peer's checkpoint as it was replaced (every second), each whole.
  CHECK(run["checkpoint_versions_read"].get<int>() >= 8);
  CHECK(run["checkpoint_problems"].empty());
  // The checkpoint it ends with is whole, for a reader that knows only the format.
  const std::string command = std::string("python3 '") + HEARSAY_SOURCE_DIR +
                              "/tests/read_safetensors.py' '" +
                              (dir / "peer1" / "checkpoint.safetensors").string() + "' > /dev/null";
  CHECK(std::system(command.c_str()) == 0);
}

TEST_CASE("sim: a link that turns slow for a while is set through the control file and heals",
          "[sim][slow]") {
  // Rank 1's own link is 1gbit,30ms from 0.5 to 1.5 epochs (about 2.5 s to 7.5 s of 100 ms
  // steps), then unlimited again: its peer process applies both from its control file.
  TempPath out;
  const auto r = hearsay::testing::run_hearsay(
      {"sim", "--peers", "4", "--algo", "dpsgd", "--model", "mlp", "--data", "synthetic", "--epochs", "2",
       "--step-time", "100ms", "--faults", "link:1:1gbit,30ms,loss=0.02@0.5ep..1.5ep", "--out", out.str(),
       "--no-progress"});
  INFO(r.all());
  CHECK(r.status == 0);
  const auto run = nlohmann::json::parse(read_file(out.path() / "summary.json"))["runs"][0];
  INFO(run.dump());
  CHECK(run["status"] == "ok");
  CHECK(run["faults"][0]["fired"] == true);
  REQUIRE(run["faults"][0]["healed_s"].is_number());
  CHECK(run["faults"][0]["healed_s"].get<double>() > run["faults"][0]["time_s"].get<double>());
  for (const auto& check : run["invariants"]) CHECK(check["held"] == true);
  const std::string log = read_file(out.path() / "dpsgd-0" / "peer1.log");
  const auto slowed = log.find(", link 1gbit,30ms,loss=0.02");
  REQUIRE(slowed != std::string::npos);
  // A later control line without the link: healed.
  const bool healed = log.find("control: no peer blocked, slowdown 1.000\n", slowed) != std::string::npos ||
                      log.find("control: no peer blocked, slowdown 1.000, stop", slowed) != std::string::npos;
  CHECK(healed);
  CHECK(read_file(out.path() / "dpsgd-0" / "peer0.log").find("link 1gbit") == std::string::npos);
}
