// `hearsay train` as a user runs it: the real binary (HEARSAY_BINARY) as a subprocess,
// its exit status, what it prints, and the metrics file it writes.
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "child_process.hpp"
#include "model/device.hpp"
#include "test_support.hpp"

using namespace hearsay::testing;

namespace {

namespace fs = std::filesystem;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The number after "key": in a flat one-line JSON object (the metrics format); NaN if absent.
double json_number(const std::string& line, const std::string& key) {
  const std::string pattern = "\"" + key + "\":";
  const auto at = line.find(pattern);
  if (at == std::string::npos) return std::nan("");
  const char* begin = line.c_str() + at + pattern.size();
  char* end = nullptr;
  const double v = std::strtod(begin, &end);
  return end == begin ? std::nan("") : v;
}

// Epoch lines with the timing figures (which vary run to run) blanked out.
std::string without_timings(const std::string& out) {
  std::string s = std::regex_replace(out, std::regex(R"([0-9.]+ samples/s)"), "X samples/s");
  s = std::regex_replace(s, std::regex(R"(samples/s  [0-9.]+ s)"), "samples/s  X s");
  return std::regex_replace(s, std::regex(R"([0-9.]+ s training)"), "X s training");
}

}  // namespace

TEST_CASE("train: a short synthetic run prints epochs and writes JSONL metrics", "[cli][process]") {
  TempPath metrics(".jsonl");
  const CliResult r = run_hearsay({"train", "--data", "synthetic", "--model", "mlp", "--epochs", "2",
                                   "--batch", "32", "--lr", "0.05", "--metrics", metrics.str()});
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  REQUIRE(r.status == 0);
  int epoch_lines = 0;
  for (const auto& line : lines_of(r.out)) {
    if (line.rfind("epoch ", 0) != 0) continue;
    CHECK(contains(line, "test acc"));
    CHECK(line.rfind(epoch_lines == 0 ? "epoch 1/2 " : "epoch 2/2 ", 0) == 0);
    ++epoch_lines;
  }
  CHECK(epoch_lines == 2);
  CHECK(contains(r.err, "mlp"));

  REQUIRE(fs::exists(metrics.path()));
  const auto records = lines_of(read_file(metrics.path()));
  REQUIRE(records.size() == 4);
  for (const auto& rec : records) {
    INFO(rec);
    CHECK(rec.front() == '{');
    CHECK(rec.back() == '}');
  }
  CHECK(contains(records[0], "\"type\":\"start\""));
  CHECK(contains(records[0], "\"model\":\"mlp\""));
  CHECK(json_number(records[0], "batch") == 32);
  CHECK(json_number(records[0], "epochs") == 2);
  for (int i : {1, 2}) {
    const auto& rec = records[static_cast<std::size_t>(i)];
    INFO(rec);
    CHECK(contains(rec, "\"type\":\"epoch\""));
    CHECK(json_number(rec, "epoch") == i);
    const double acc = json_number(rec, "test_acc");
    // The synthetic classes are separable: one epoch of training reaches ~0.99 (chance is
    // 0.1), so 0.9 fails a run that does not train, not one that trains a little worse.
    CHECK(acc > 0.9);
    CHECK(acc <= 1.0);
  }
  const auto& final_rec = records[3];
  INFO(final_rec);
  CHECK(contains(final_rec, "\"type\":\"final\""));
  CHECK(contains(final_rec, "\"interrupted\":false"));
  // 6000 synthetic examples, batch 32: 188 steps per epoch.
  CHECK(json_number(final_rec, "step") == 2 * 188);
  const double final_acc = json_number(final_rec, "test_acc");
  CHECK(final_acc > 0.5);  // chance is 0.1; measured 0.999
  CHECK(final_acc == json_number(records[2], "test_acc"));
  // Without --save nothing keeps the model, and the run says so.
  CHECK(contains(r.out, "the trained model was not saved: give --save FILE to keep it"));
}

TEST_CASE("train: --save writes the trained model, loadable as this model, with its accuracy",
          "[cli][process]") {
  TempPath dir("");
  fs::create_directories(dir.path());
  const fs::path file = dir.path() / "model.safetensors";
  const CliResult r = run_hearsay({"train", "--data", "synthetic", "--model", "mlp", "--epochs", "1",
                                   "--batch", "64", "--save", file.string()});
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  REQUIRE(r.status == 0);
  CHECK(contains(r.out, "saved " + file.string()));
  CHECK_FALSE(contains(r.out, "not saved"));
  REQUIRE(fs::exists(file));
  const std::string bytes = read_file(file);
  // The model's tensors and the accuracy in the metadata; no optimizer state, so that the
  // file is a plain state_dict.
  CHECK(contains(bytes, "\"0.weight\""));
  CHECK(contains(bytes, "\"test_acc\""));
  CHECK_FALSE(contains(bytes, "optimizer.state"));
  // Nothing else is left in the directory (no temporary file).
  CHECK(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator{}) == 1);

  // A directory that does not exist is refused before any training.
  const CliResult missing = run_hearsay({"train", "--data", "synthetic", "--model", "mlp", "--epochs", "1",
                                         "--save", (dir.path() / "no" / "such" / "m.safetensors").string()});
  CHECK(missing.status == 2);
  CHECK(contains(missing.err, "does not exist"));
  CHECK_FALSE(contains(missing.out, "epoch 1/1"));
}

TEST_CASE("train: bad flags exit with code 2 and say why", "[cli][process]") {
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> message;  // each must appear in the output
  };
  const std::vector<Case> cases{
      {{"--bogus"}, {"--bogus"}},
      {{"--epochs", "0"}, {"--epochs"}},
      {{"--epochs", "abc"}, {"--epochs", "abc"}},
      {{"--model", "resnet"}, {"resnet", "mlp", "lenet"}},
      {{"--shard", "3/2"}, {"3/2"}},
      {{"--partition", "foo"}, {"foo"}},
      {{"--lr-schedule", "weird"}, {"weird"}},
      {{"--device", "tpu"}, {"tpu"}},
      // Numbers: what was expected, in words, and no 310-digit bound.
      {{"--lr", "abc"}, {"--lr: 'abc' is not a number; expected a learning rate of at least 0"}},
      {{"--lr", "inf"}, {"'inf' is not a finite number", "e.g. 0.1"}},
      {{"--lr", "nan"}, {"--lr: 'nan' is not a finite number"}},  // was blamed on --lr-schedule
      {{"--lr", "-1"}, {"'-1' is below 0"}},
      {{"--momentum", "1"}, {"'1' is not below 1; expected a momentum"}},
  };
  for (const auto& c : cases) {
    // A quick valid run apart from the flag under test (not repeated: a repeated option is
    // an error of its own), so that a flag wrongly accepted costs seconds, not minutes.
    std::vector<std::string> args{"train", "--data", "synthetic"};
    if (c.args[0] != "--model") args.insert(args.end(), {"--model", "mlp"});
    if (c.args[0] != "--epochs") args.insert(args.end(), {"--epochs", "1"});
    args.insert(args.end(), c.args.begin(), c.args.end());
    const CliResult r = run_hearsay(args);
    INFO("args: " << c.args[0] << (c.args.size() > 1 ? " " + c.args[1] : std::string()) << "\nstdout:\n"
                  << r.out << "stderr:\n"
                  << r.err);
    CHECK(r.status == 2);
    CHECK_FALSE(contains(r.out, "epoch 1/1"));  // rejected before training
    for (const auto& m : c.message) CHECK(contains(r.err, m));
    CHECK_FALSE(contains(r.err, "000000000000"));
    // One hint to run --help, not two.
    CHECK(r.err.find("Run ") == r.err.rfind("Run "));
  }
}

TEST_CASE("peer: a number in the config file is checked as the flag is, in words", "[cli][process]") {
  TempPath dir;
  std::filesystem::create_directories(dir.path());
  std::ofstream(dir.file("bad.toml")) << "[train]\nlr = -1\n";
  const CliResult r = run_hearsay({"peer", "--config", dir.file("bad.toml"), "--listen", "tcp://127.0.0.1:0",
                                   "--id", "p", "--insecure", "--data", "synthetic"});
  INFO(r.all());
  CHECK(r.status == 2);
  CHECK(contains(r.err, "bad.toml:2: 'train.lr': --lr: '-1' is below 0; expected a learning rate"));
  CHECK_FALSE(contains(r.err, "000000000000"));
}

TEST_CASE("hearsay: a word that is no command is named, and -V is the version", "[cli][process]") {
  const CliResult unknown = run_hearsay({"frobnicate", "--lr", "3"});
  INFO(unknown.all());
  CHECK(unknown.status == 2);
  CHECK(contains(unknown.err,
                 "'frobnicate' is not a command; the commands are train, keygen, peer, topology, sim"));
  const CliResult version_word = run_hearsay({"version"});
  CHECK(version_word.status == 2);
  CHECK(contains(version_word.err, "hearsay --version"));
  for (const char* flag : {"-V", "--version"}) {
    const CliResult version = run_hearsay({flag});
    INFO(flag << ": " << version.all());
    CHECK(version.status == 0);
    CHECK(contains(version.out, "hearsay 0.1.0"));
  }
  // Help shows what a flag takes, no internal defaults ("--no-progress{false}") nor
  // limits nobody needs ("[1 - 4294967296]"); sim's --model lists the zoo.
  const CliResult sim_help = run_hearsay({"sim", "--help"});
  CHECK_FALSE(contains(sim_help.out, "{false}"));
  CHECK(contains(sim_help.out, "--no-progress"));
  CHECK(contains(sim_help.out, "{mlp,lenet,resnet20}"));
  CHECK_FALSE(contains(run_hearsay({"peer", "--help"}).out, "4294967296"));
  // Every command's help shows examples.
  for (const char* command : {"train", "peer", "keygen", "topology", "sim"}) {
    const CliResult help = run_hearsay({command, "--help"});
    INFO(command);
    CHECK(contains(help.out, "Examples:"));
  }
}

TEST_CASE("hearsay: no subcommand is a usage error, --help is not", "[cli][process]") {
  const CliResult none = run_hearsay({});
  INFO(none.all());
  CHECK(none.status == 2);
  CHECK_FALSE(none.err.empty());

  const CliResult top = run_hearsay({"--help"});
  CHECK(top.status == 0);
  CHECK(contains(top.all(), "train"));

  const CliResult help = run_hearsay({"train", "--help"});
  INFO(help.all());
  CHECK(help.status == 0);
  for (const char* flag :
       {"--model", "--epochs", "--batch", "--lr", "--momentum", "--threads", "--seed", "--metrics", "--data"})
    CHECK(contains(help.all(), flag));
}

TEST_CASE("train and peer: --device cuda where it cannot work is one line and exit 2",
          "[cli][device][process]") {
  std::string why_none;
  if (hearsay::cuda_device_count(why_none) > 0) HEARSAY_SKIP("this machine has a CUDA device: nothing to refuse");
  for (const char* asked : {"cuda", "cuda:1"}) {
    const CliResult r = run_hearsay({"train", "--data", "synthetic", "--model", "mlp", "--device", asked});
    INFO(r.err);
    CHECK(r.status == 2);
    CHECK(r.out.empty());  // nothing trained
    CHECK(r.err ==
          "hearsay train: --device " + std::string(asked) + ": " + why_none + "; use --device cpu\n");
  }
  // A peer refuses it before loading data or opening a socket.
  const CliResult peer = run_hearsay({"peer", "--listen", "tcp://127.0.0.1:*", "--id", "p", "--insecure",
                                      "--data", "synthetic", "--device", "cuda:0"});
  CHECK(peer.status == 2);
  CHECK(peer.err == "hearsay peer: --device cuda:0: " + why_none + "; use --device cpu\n");
  // auto trains on the CPU and says why.
  const CliResult r = run_hearsay({"train", "--data", "synthetic", "--model", "mlp", "--epochs", "1"});
  CHECK(r.status == 0);
  CHECK(contains(r.err, "device cpu (auto: " + why_none + "; training on the CPU)"));
}

TEST_CASE("train: a missing data directory exits 1 naming it and the Debian package", "[cli][process]") {
  const CliResult r = run_hearsay({"train", "--data", "/nonexistent/dir", "--model", "mlp", "--epochs", "1"});
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  CHECK(r.status == 1);
  CHECK(contains(r.err, "/nonexistent/dir"));
  CHECK(contains(r.err, "dataset-fashion-mnist"));
  CHECK_FALSE(contains(r.out, "epoch"));
}

TEST_CASE("train: an unwritable metrics file fails before training", "[cli][process]") {
  const CliResult r = run_hearsay({"train", "--data", "synthetic", "--model", "mlp", "--epochs", "1",
                                   "--metrics", "/nonexistent/dir/m.jsonl"});
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  CHECK(r.status != 0);
  CHECK(contains(r.err, "/nonexistent/dir/m.jsonl"));
  CHECK_FALSE(contains(r.out, "epoch"));
  CHECK_FALSE(fs::exists("/nonexistent/dir/m.jsonl"));
}

TEST_CASE("train: metrics to /dev/stdout are appended there, not truncated or locked", "[cli][process]") {
  const CliResult r = run_hearsay({"train", "--data", "synthetic", "--model", "mlp", "--epochs", "1",
                                   "--metrics", "/dev/stdout"});
  INFO(r.out << r.err);
  CHECK(r.status == 0);
  CHECK(contains(r.out, "\"type\":\"start\""));
  CHECK(contains(r.out, "\"type\":\"final\""));
  CHECK(contains(r.out, "final test accuracy"));  // the program's own lines are kept too
}

TEST_CASE("train: the same seed gives the same run", "[cli][process]") {
  auto run = [](const char* seed) {
    return run_hearsay({"train", "--data", "synthetic", "--model", "mlp", "--epochs", "1", "--threads", "2",
                        "--seed", seed});
  };
  const CliResult a = run("5"), b = run("5"), c = run("6");
  INFO("run a:\n" << a.out << "run b:\n" << b.out << "run c:\n" << c.out);
  REQUIRE(a.status == 0);
  REQUIRE(b.status == 0);
  REQUIRE(c.status == 0);
  const std::string sa = without_timings(a.out);
  REQUIRE(contains(sa, "epoch 1/1  train loss "));
  CHECK(contains(sa, "X samples/s  X s"));  // the timings were blanked, nothing else
  CHECK(sa == without_timings(b.out));
  // Another seed gives another run, so the comparison above can tell runs apart.
  CHECK(sa != without_timings(c.out));
}

TEST_CASE("train: HEARSAY_DATA picks the data when --data is absent", "[cli][process]") {
  const CliResult r =
      run_hearsay({"train", "--model", "mlp", "--epochs", "1", "--threads", "2"}, {"HEARSAY_DATA=synthetic"});
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  CHECK(r.status == 0);
  CHECK(contains(r.err, "data synthetic"));
  CHECK(contains(r.out, "epoch 1/1"));
  // And --data wins over the variable.
  const CliResult flag = run_hearsay(
      {"train", "--data", "/nonexistent/dir", "--model", "mlp", "--epochs", "1"}, {"HEARSAY_DATA=synthetic"});
  CHECK(flag.status == 1);
  CHECK(contains(flag.err, "/nonexistent/dir"));
}

TEST_CASE("train: a warm-up schedule is judged against the run's real length", "[cli][process]") {
  // 6000 synthetic examples / batch 64 = 94 steps: a 50-step warm-up fits, 500 does not.
  const CliResult ok = run_hearsay(
      {"train", "--data", "synthetic", "--model", "mlp", "--epochs", "1", "--lr-schedule", "cosine:50"});
  INFO("stderr:\n" << ok.err);
  CHECK(ok.status == 0);
  CHECK(contains(ok.err, "warmup=50"));
  const CliResult too_long = run_hearsay(
      {"train", "--data", "synthetic", "--model", "mlp", "--epochs", "1", "--lr-schedule", "cosine:500"});
  CHECK(too_long.status == 2);
  CHECK(contains(too_long.err, "cosine:500"));
}

TEST_CASE("train: an interrupted epoch is reported as partial", "[cli][process]") {
  // Ctrl-C mid-epoch printed the epoch's line as if the epoch were complete.
  TempPath dir;
  std::filesystem::create_directories(dir.path());
  ChildProcess train({"train", "--data", "synthetic", "--model", "lenet", "--epochs", "50", "--threads", "1",
                      "--progress-every", "0.05"},
                     dir.file("out"), dir.file("err"));
  // A progress line of epoch 2 says that its steps have begun (a signal between epoch 1's
  // line and epoch 2's first step ends the run at the boundary, with nothing partial).
  REQUIRE(eventually([&] { return contains(train.err(), "epoch 2/50  step"); }, std::chrono::seconds(60)));
  train.signal(SIGINT);  // early in epoch 2, which takes about a second
  CHECK(train.wait_for(std::chrono::seconds(30)) == 130);
  const std::string out = train.out();
  INFO(out);
  CHECK(contains(out, "epoch 2/50 (interrupted after "));
  CHECK_FALSE(contains(out, "epoch 1/50 (interrupted"));
}

TEST_CASE("hearsay does not load cuBLAS at start-up: CPU peers stay small", "[cli][device][process]") {
  // Linked, libcublas and libcublasLt cost every process ~210 MB of resident memory and
  // ~60 ms of relocations (measured: 36 MB against 252 MB for a CPU training run); the
  // CUDA backend loads cuBLAS when it makes its first handle instead.
  FILE* pipe = popen((std::string("ldd ") + HEARSAY_BINARY + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string libraries;
  char buf[512];
  while (std::fgets(buf, sizeof buf, pipe) != nullptr) libraries += buf;
  pclose(pipe);
  INFO(libraries);
  CHECK(contains(libraries, "libc.so"));  // ldd listed the binary's libraries
  CHECK_FALSE(contains(libraries, "libcublas"));
}
