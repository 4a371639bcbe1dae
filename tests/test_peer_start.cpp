// What a peer's start does for a user who starts several by hand: files that are one
// peer's own cannot be shared by two, what a crash left behind is cleaned, a rank resumes
// only its own checkpoint, and --min-peers holds training until the others are up.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "child_process.hpp"
#include "test_support.hpp"

using namespace hearsay::testing;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

std::vector<std::string> peer(std::vector<std::string> extra) {
  std::vector<std::string> args = {"peer",      "--insecure", "--data",       "synthetic", "--model", "mlp",
                                   "--threads", "1",          "--log-every", "100"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// Every line of a metrics file as JSON; FAILs on a line that is not whole.
std::vector<nlohmann::json> records(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    INFO(path << ": " << line);
    REQUIRE(nlohmann::json::accept(line));
    out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

}  // namespace

TEST_CASE("peer: a metrics file or checkpoint directory another live peer holds is refused, and the holder "
          "loses nothing",
          "[peer][process]") {
  TempPath dir;
  std::filesystem::create_directories(dir.path());
  const std::string metrics = dir.file("metrics.jsonl"), ckpt = dir.file("ckpt");
  ChildProcess holder(peer({"--listen", "tcp://127.0.0.1:*", "--id", "holder", "--epochs", "1000", "--metrics",
                            metrics, "--checkpoint", ckpt, "--ready-file", dir.file("holder.ready")}),
                      dir.file("holder.out"), dir.file("holder.err"));
  const std::string address = await_ready(holder, dir.file("holder.ready"), "holder").address;
  REQUIRE(eventually([&] { return contains(read_file(metrics), "\"metrics\""); }, 20s));

  const CliResult same_metrics = run_hearsay(
      peer({"--listen", "tcp://127.0.0.1:*", "--id", "second", "--join", address, "--metrics", metrics}));
  CHECK(same_metrics.status == 1);
  CHECK_THAT(same_metrics.err, Contains("metrics file '" + metrics + "' is being written by another running"));
  CHECK_THAT(same_metrics.err, Contains("--metrics 'metrics-{rank}.jsonl'"));

  const CliResult same_checkpoint = run_hearsay(
      peer({"--listen", "tcp://127.0.0.1:*", "--id", "third", "--join", address, "--checkpoint", ckpt}));
  CHECK(same_checkpoint.status == 1);
  CHECK_THAT(same_checkpoint.err, Contains("the checkpoint directory '" + ckpt + "' is in use by another running "
                                           "peer (pid " + std::to_string(holder.pid()) + ", peer 'holder' on "));

  holder.signal(SIGTERM);
  REQUIRE(holder.wait_for(20s) == 0);
  // Every line whole and the holder's own, from its start to its final record.
  const auto lines = records(metrics);
  REQUIRE(lines.size() >= 3);
  CHECK(lines.front()["type"] == "start");
  CHECK(lines.back()["type"] == "final");
  for (const auto& r : lines)
    if (r.contains("peer")) CHECK(r["peer"] == "holder");
  CHECK(std::filesystem::exists(std::filesystem::path(ckpt) / "checkpoint.safetensors"));
}

TEST_CASE("peer: a checkpoint write cut short is cleaned at the next start, and a rank resumes only its own "
          "checkpoint",
          "[peer][process]") {
  TempPath dir;
  const std::filesystem::path ckpt = dir.path() / "ckpt";
  std::filesystem::create_directories(ckpt);
  // What a SIGKILL in the middle of a write leaves (AtomicFileWriter's temporary name).
  std::ofstream(ckpt / ".checkpoint.safetensors.tmp-Ab3dEf") << "half a checkpoint";
  std::ofstream(ckpt / ".checkpoint.optimizer-40.safetensors.tmp-x1Y2z3") << "half an optimizer file";
  const CliResult first = run_hearsay(peer({"--listen", "tcp://127.0.0.1:*", "--rank", "0", "--world", "2",
                                            "--epochs", "1", "--checkpoint", ckpt.string()}));
  REQUIRE(first.status == 0);
  CHECK_THAT(first.err, Contains("removed 2 temporary file(s) from '" + ckpt.string() + "'"));
  for (const auto& entry : std::filesystem::directory_iterator(ckpt))
    CHECK_FALSE(contains(entry.path().filename().string(), ".tmp-"));

  // Rank 1 given rank 0's directory: its shard is another, so the state is not its own.
  const CliResult other = run_hearsay(peer({"--listen", "tcp://127.0.0.1:*", "--rank", "1", "--world", "2",
                                            "--epochs", "2", "--checkpoint", ckpt.string(), "--resume"}));
  CHECK(other.status == 1);
  CHECK_THAT(other.err, Contains("was written by peer 'rank0', this peer is 'rank1'"));
  CHECK_THAT(other.err, Contains("--checkpoint 'ckpt-{rank}'"));
  // {rank} gives each rank its own directory from one command line.
  const CliResult placeholder =
      run_hearsay(peer({"--listen", "tcp://127.0.0.1:*", "--rank", "1", "--world", "2", "--epochs", "1",
                        "--checkpoint", (dir.path() / "ckpt-{rank}").string()}));
  CHECK(placeholder.status == 0);
  CHECK(std::filesystem::exists(dir.path() / "ckpt-1" / "checkpoint.safetensors"));
}

TEST_CASE("peer: --min-peers holds training until that many peers are live, and gives up after --join-timeout",
          "[peer][process]") {
  TempPath dir;
  std::filesystem::create_directories(dir.path());
  const auto alone_start = std::chrono::steady_clock::now();
  const CliResult alone =
      run_hearsay(peer({"--listen", "tcp://127.0.0.1:*", "--id", "a", "--min-peers", "2", "--join-timeout", "2s"}));
  const auto waited = std::chrono::steady_clock::now() - alone_start;
  CHECK(alone.status == 1);
  CHECK(waited >= 2s);
  CHECK(waited < 20s);
  CHECK_THAT(alone.err, Contains("--min-peers 2: after 2s this peer still waits for 1 more peer (live now: a)"));

  ChildProcess first(peer({"--listen", "tcp://127.0.0.1:*", "--id", "first", "--epochs", "1", "--min-peers", "2",
                           "--metrics", dir.file("first.jsonl"), "--ready-file", dir.file("first.ready")}),
                     dir.file("first.out"), dir.file("first.err"));
  const std::string address = await_ready(first, dir.file("first.ready"), "first").address;
  CHECK(eventually([&] { return contains(first.err(), "waiting for 2 live peers before training"); }, 10s));
  // Alone, it takes no step: an epoch of this model takes about a second.
  std::this_thread::sleep_for(3s);
  CHECK(first.running());
  CHECK_FALSE(contains(read_file(dir.file("first.jsonl")), "\"metrics\""));

  const CliResult second = run_hearsay(peer({"--listen", "tcp://127.0.0.1:*", "--id", "second", "--join", address,
                                             "--epochs", "1", "--min-peers", "2"}));
  CHECK(second.status == 0);
  REQUIRE(first.wait_for(30s) == 0);
  CHECK_THAT(first.err(), Contains("2 peers live: training starts (--min-peers 2)"));
  // It trained its epoch with the second peer, not alone: exchanges from the first interval on.
  bool reported = false;
  for (const auto& r : records(dir.file("first.jsonl")))
    if (r["type"] == "metrics" && !reported) {
      reported = true;
      CHECK(r["live_members"] == 2);
    }
  CHECK(reported);
}
