// The simulator's side of a script's evaluator (sim/external_evaluator.hpp), against small
// evaluators written here in Python (the protocol is bytes on two pipes; the real one is
// hearsay.torch.evaluate_with, which tests/python_sim_test.py runs under `hearsay sim`).
#include <catch2/catch.hpp>
#include <fstream>

#include "sim/external_evaluator.hpp"
#include "test_support.hpp"

using hearsay::sim::ExternalEvaluator;
using hearsay::testing::TempPath;

namespace {

// A script that serves the protocol: its fingerprint names the arguments it was given, and
// it answers each request with (the mean of the values, their count).
constexpr const char* kEchoEvaluator = R"(import json, os, struct, sys
r, w = (int(v) for v in os.environ["HEARSAY_EVALUATOR"].split(":"))
def read(n):
    data = b""
    while len(data) < n:
        chunk = os.read(r, n - len(data))
        if not chunk:
            sys.exit(0)
        data += chunk
    return data
os.write(w, (json.dumps({"fingerprint": "args:" + " ".join(sys.argv[1:]), "count": 3}) + "\n").encode())
while True:
    (n,) = struct.unpack("<Q", read(8))
    values = struct.unpack(f"<{n}f", read(4 * n))
    os.write(w, struct.pack("<dd", sum(values) / n, float(n)))
)";

std::string write_script(const TempPath& dir, const std::string& name, const std::string& text) {
  std::filesystem::create_directories(dir.path());
  const std::string path = dir.file(name);
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("external evaluator: the script gets the run's flags and answers each request", "[sim-setup]") {
  TempPath dir;
  const std::string script = write_script(dir, "echo.py", kEchoEvaluator);
  ExternalEvaluator evaluator("python3 " + script + " --own 1", {"--data", "/a dir", "--rank", "0"},
                              dir.file("evaluator.log"), std::chrono::seconds(60));
  // The command's own words first, then the flags, each one word (the space stays inside).
  CHECK(evaluator.fingerprint() == "args:--own 1 --data /a dir --rank 0");
  CHECK(evaluator.count() == 3);
  const std::vector<float> state{1.0f, 2.0f, 6.0f};
  const auto [accuracy, loss] = evaluator.evaluate(state);
  CHECK(accuracy == 3.0);
  CHECK(loss == 3.0);
  const auto again = evaluator.evaluate(std::vector<float>{0.5f, 0.5f, 0.5f});
  CHECK(again.first == 0.5);
  CHECK_THROWS_AS(evaluator.evaluate(std::vector<float>{1.0f}), std::invalid_argument);
}

TEST_CASE("external evaluator: a script that fails or says something else is an error saying why",
          "[sim-setup]") {
  TempPath dir;
  const auto log = dir.file("evaluator.log");
  const std::string fails =
      write_script(dir, "fails.py",
                   "import sys\nprint('ValueError: no test set in /nowhere', file=sys.stderr)\n"
                   "sys.exit(1)\n");
  CHECK_THROWS_WITH(
      ExternalEvaluator("python3 " + fails, {}, log, std::chrono::seconds(60)),
      Catch::Contains("ended before saying what it evaluates") && Catch::Contains("no test set in /nowhere"));
  const std::string chatty = write_script(
      dir, "chatty.py",
      "import os\nw = int(os.environ['HEARSAY_EVALUATOR'].split(':')[1])\nos.write(w, b'hello\\n')\n");
  CHECK_THROWS_WITH(ExternalEvaluator("python3 " + chatty, {}, log, std::chrono::seconds(60)),
                    Catch::Contains("is not {\"fingerprint\", \"count\"}: hello"));
  const std::string silent = write_script(dir, "silent.py", "import time\ntime.sleep(30)\n");
  CHECK_THROWS_WITH(ExternalEvaluator("python3 " + silent, {}, log, std::chrono::seconds(1)),
                    Catch::Contains("said nothing within 1 s"));
}
