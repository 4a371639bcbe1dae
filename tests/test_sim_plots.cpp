// The simulator's PNG plots: drawn by the real gnuplot (scripts/setup installs it) from
// hand-made runs, and skipped, without a throw or a stray file, when gnuplot is missing or
// fails.
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "sim/plots.hpp"
#include "test_support.hpp"

using namespace hearsay::sim;
using Catch::Matchers::Contains;
using hearsay::testing::read_file;
using hearsay::testing::TempPath;

namespace {

const char* const kPlotFiles[] = {"accuracy_vs_time.png", "accuracy_vs_epochs.png", "consensus_vs_time.png",
                                  "accuracy_vs_bytes.png"};

// A run with `points` evaluations: accuracy rising, consensus distance falling.
RunResult run_with_curve(const std::string& algo, const std::string& topology, int repeat, int points) {
  RunResult r;
  r.algo = algo;
  r.topology = topology;
  r.peers = 4;
  r.repeat = repeat;
  r.target_acc = 0.8;
  r.status = "ok";
  for (int i = 0; i < points; ++i) {
    Evaluation e;
    e.time_s = 5.0 * (i + 1);
    e.run_epochs = 0.5 * (i + 1);
    e.peers = 4;
    e.acc_avg_model = 0.5 + 0.1 * i;
    e.consensus_distance = 1.0 / ((i + 1) * (i + 1) * 10.0);
    e.bytes_per_peer = 3e6 * (i + 1);
    r.curve.push_back(e);
  }
  return r;
}

// The script write_plots hands gnuplot, caught by a stand-in for it that only keeps it.
std::string gnuplot_script_for(const std::vector<RunResult>& runs) {
  TempPath dir;
  std::filesystem::create_directories(dir.path());
  const auto script = dir.path() / "script.gp";
  const auto fake = dir.path() / "gnuplot";
  std::ofstream(fake) << "#!/bin/sh\ncat > '" << script.string() << "'\n";
  std::filesystem::permissions(fake, std::filesystem::perms::owner_all);
  (void)write_plots(dir.path() / "plots", runs, fake.string());
  return read_file(script);
}

std::vector<std::string> files_in(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  if (std::filesystem::exists(dir))
    for (const auto& entry : std::filesystem::directory_iterator(dir))
      names.push_back(entry.path().filename().string());
  return names;
}

}  // namespace

TEST_CASE("sim plots: four PNG files, written atomically", "[sim-plots][process]") {
  // A directory name with a space and a quote: the paths travel as gnuplot string literals.
  TempPath base;
  const auto dir = base.path() / "plots dir 'quoted'";
  const std::vector<RunResult> runs{run_with_curve("gossip", "random", 0, 4),
                                    run_with_curve("dpsgd_x", "exp", 1, 3),
                                    run_with_curve("allreduce", "ring", 0, 0)};  // no evaluations: left out
  const PlotResult result = write_plots(dir, runs);
  INFO(result.skipped);
  REQUIRE(result.skipped.empty());
  REQUIRE(result.written.size() == 4);
  for (const char* name : kPlotFiles) {
    INFO(name);
    const auto path = dir / name;
    CHECK(std::find(result.written.begin(), result.written.end(), path) != result.written.end());
    REQUIRE(std::filesystem::exists(path));
    const std::string png = read_file(path);
    CHECK(png.size() > 2048);
    CHECK(png.rfind("\x89PNG\r\n\x1a\n", 0) == 0);
  }
  CHECK(files_in(dir).size() == 4);  // no NAME.png.tmp left behind

  SECTION("drawing again replaces the plots") {
    const PlotResult again = write_plots(dir, {run_with_curve("gossip", "random", 0, 2)});
    CHECK(again.skipped.empty());
    CHECK(again.written.size() == 4);
    CHECK(files_in(dir).size() == 4);
  }
  SECTION("runs that do not know their bytes get no bytes plot, and the earlier one goes") {
    RunResult unknown = run_with_curve("gossip", "random", 0, 2);
    for (auto& e : unknown.curve) e.bytes_per_peer = -1;
    const PlotResult again = write_plots(dir, {unknown});
    CHECK(again.skipped.empty());
    CHECK(again.written.size() == 3);
    CHECK_FALSE(std::filesystem::exists(dir / "accuracy_vs_bytes.png"));
  }
}

TEST_CASE("sim plots: a single evaluation point and a zero consensus distance still plot",
          "[sim-plots][process]") {
  TempPath dir;
  RunResult one = run_with_curve("gossip", "random", 0, 1);
  one.curve[0].consensus_distance = 0;  // no log axis for this one
  one.target_acc.reset();
  const PlotResult result = write_plots(dir.path(), {one});
  INFO(result.skipped);
  CHECK(result.skipped.empty());
  CHECK(result.written.size() == 4);
}

TEST_CASE("sim plots: a run at consensus distance 0 is drawn at a stated floor on the log axis",
          "[sim-plots][process]") {
  // All-reduce's peers are identical: its exact zeros were left out of the log-scale plot,
  // and the run vanished from it.
  RunResult allreduce = run_with_curve("allreduce", "ring", 0, 3);
  for (auto& e : allreduce.curve) e.consensus_distance = 0;
  const RunResult gossip = run_with_curve("gossip", "random", 0, 3);  // smallest distance 1/90
  const std::string text = gnuplot_script_for({allreduce, gossip});
  CHECK_THAT(text, Contains("set logscale y"));
  CHECK_THAT(text, Contains("allreduce (exactly 0: drawn at 0.001)"));
  CHECK_THAT(text, !Contains("gossip (exactly 0"));
  CHECK_THAT(text, !Contains("nan"));
}

TEST_CASE("sim plots: no run with evaluations gives nothing to plot", "[sim-plots]") {
  TempPath dir;
  PlotResult result;
  REQUIRE_NOTHROW(result = write_plots(dir.path(), {run_with_curve("gossip", "random", 0, 0)}));
  CHECK_FALSE(result.skipped.empty());
  CHECK(result.written.empty());
  CHECK(files_in(dir.path()).empty());
  CHECK_FALSE(write_plots(dir.path(), {}).skipped.empty());
  CHECK(files_in(dir.path()).empty());
}

TEST_CASE("sim plots: a missing gnuplot skips the plots and names the executable", "[sim-plots]") {
  TempPath dir;
  const std::vector<RunResult> runs{run_with_curve("gossip", "random", 0, 3)};
  PlotResult result;
  REQUIRE_NOTHROW(result = write_plots(dir.path(), runs, "/nonexistent/gnuplot"));
  CHECK_THAT(result.skipped, Contains("/nonexistent/gnuplot"));
  CHECK(result.written.empty());
  CHECK(files_in(dir.path()).empty());

  REQUIRE_NOTHROW(result = write_plots(dir.path(), runs, "hearsay-no-such-gnuplot"));
  CHECK_THAT(result.skipped, Contains("hearsay-no-such-gnuplot not found on PATH"));
  CHECK_THAT(result.skipped, Contains("gnuplot-nox"));
  CHECK(files_in(dir.path()).empty());
}

TEST_CASE("sim plots: a failing gnuplot leaves no partial or temporary file", "[sim-plots][process]") {
  TempPath dir;
  const std::vector<RunResult> runs{run_with_curve("gossip", "random", 0, 3)};

  SECTION("it exits with an error without reading its script") {
    PlotResult result;
    REQUIRE_NOTHROW(result = write_plots(dir.path(), runs, "/bin/false"));
    CHECK_THAT(result.skipped, Contains("/bin/false"));
    CHECK_THAT(result.skipped, Contains("status 1"));
    CHECK(result.written.empty());
    CHECK(files_in(dir.path()).empty());
  }

  SECTION("it writes part of the files, then reports an error") {
    // A stand-in gnuplot that runs the real one on its script, then complains and fails:
    // the temporary files gnuplot wrote must not survive, and its message is the reason.
    TempPath bin;
    std::filesystem::create_directories(bin.path());
    const auto fake = bin.path() / "gnuplot";
    {
      std::ofstream script(fake);
      script << "#!/bin/sh\ngnuplot \"$@\"\necho 'line 7: simulated plotting error' >&2\nexit 3\n";
    }
    std::filesystem::permissions(fake, std::filesystem::perms::owner_all);
    PlotResult result;
    REQUIRE_NOTHROW(result = write_plots(dir.path(), runs, fake.string()));
    CHECK_THAT(result.skipped, Contains("status 3"));
    CHECK_THAT(result.skipped, Contains("simulated plotting error"));
    CHECK(result.written.empty());
    CHECK(files_in(dir.path()).empty());
  }
}

TEST_CASE("sim plots: the legend is under the plot, every fired fault is marked, and a failed run ends in a "
          "cross with its status",
          "[sim-plots][process]") {
  RunResult gossip = run_with_curve("gossip", "random", 0, 4);
  gossip.fault_firings = {{"kill:3@10s", Fault::Kind::kill, 3, true, 10.25, 1.0, std::nullopt},
                          {"partition:0-1|2-3@4s..8s", Fault::Kind::partition, -1, true, 4, 0.4, 8.0},
                          {"restart:3@90s", Fault::Kind::restart, 3, false, 0, 0, std::nullopt}};
  gossip.status = "ok (restart:3@90s never fired: the run ended at 20.0 s (2.00 epochs))";
  RunResult allreduce = run_with_curve("allreduce", "ring", 0, 2);
  allreduce.fault_firings = {{"kill:3@10s", Fault::Kind::kill, 3, true, 10.5, 1.05, std::nullopt}};
  allreduce.status = "failed: rank0 exit 1: lost a peer the algorithm cannot train without: peer 'rank3'";
  allreduce.wall_s = 12.5;
  const std::string text = gnuplot_script_for({gossip, allreduce});
  // Under the plot, where it hides nothing, and the axis starts at 0 so that no mark is off it.
  CHECK_THAT(text, Contains("set key outside below"));
  CHECK_THAT(text, Contains("set xrange [0:*]"));
  // The kill fired in both runs at nearly the same time: one labelled line per plot, at the
  // first run's time (10.25 s, 1 epoch); the partition shaded from its start to its end.
  CHECK_THAT(text, Contains("set arrow 2 from 10.25, graph 0 to 10.25, graph 1 nohead"));
  CHECK_THAT(text, Contains("set label 2 'kill:3@10s' at 10.25, graph 0.03 rotate by 90"));
  CHECK_THAT(text, Contains("set arrow 2 from 1, graph 0 to 1, graph 1 nohead"));
  CHECK_THAT(text, Contains("set object 1 rect from 4, graph 0 to 8, graph 1 behind"));
  CHECK_THAT(text, Contains("set label 1 'partition:0-1|2-3@4s..8s (gossip)'"));
  // A fault that never fired is not drawn, but the legend says so.
  CHECK_THAT(text, !Contains("'restart:3@90s'"));
  CHECK_THAT(text, Contains("title 'gossip - ok, but restart:3@90s never fired'"));
  // The failed run: its status in the legend, and a dotted line from its last evaluation
  // (10 s, 1 epoch) to where it ended (its wall time, 12.5 s; the kill's 1.05 epochs), a
  // cross there.
  CHECK_THAT(text, Contains("title 'allreduce - failed: rank0 exit 1'"));
  CHECK_THAT(text, Contains("$end1 << EOD\n10 1 0.6 0.025 6\n12.5 1.05 0.6 0.025 6\nEOD"));
  CHECK_THAT(text, Contains("$end1 using 1:3 with lines linetype 2 dashtype 3 notitle, $end1 every ::1 using 1:3 "
                            "with points linetype 2 pointtype 2 pointsize 3"));
  CHECK_THAT(text, Contains("$end1 using 2:3"));
  CHECK_THAT(text, !Contains("$end0"));
}

TEST_CASE("sim plots: accuracy against bytes goes on a log axis when the runs' bytes span decades",
          "[sim-plots]") {
  RunResult f32 = run_with_curve("dpsgd", "exp", 0, 3);
  RunResult topk = run_with_curve("dpsgd", "exp", 0, 3);
  topk.compress = "topk:1%";
  for (auto& e : f32.curve) e.bytes_per_peer *= 100;
  const std::string spread = gnuplot_script_for({f32, topk});
  CHECK_THAT(spread, Contains("set output") && Contains("accuracy_vs_bytes.png.tmp"));
  CHECK_THAT(spread, Contains("set logscale x\nset xrange [*:*]"));
  CHECK_THAT(spread, Contains("using 5:3"));
  const std::string close = gnuplot_script_for({topk});
  CHECK_THAT(close, Contains("using 5:3") && !Contains("set logscale x"));
  // A compressed all-reduce is the reference: the legend says which.
  RunResult power = run_with_curve("allreduce", "ring", 0, 3);
  power.compress = "powersgd:2";
  CHECK_THAT(gnuplot_script_for({topk, power}),
             Contains("all-reduce''s (powersgd:2) final accuracy - 0.5 point"));
}

TEST_CASE("sim plots: the time axis of virtual runs says virtual time, not wall time", "[sim-plots]") {
  RunResult gossip = run_with_curve("gossip", "random", 0, 3);
  CHECK_THAT(gnuplot_script_for({gossip}),
             Contains("set xlabel 'wall time (s)'") && !Contains("virtual time"));
  gossip.engine = "virtual";
  RunResult allreduce = run_with_curve("allreduce", "ring", 0, 3);
  allreduce.engine = "virtual";
  const std::string text = gnuplot_script_for({gossip, allreduce});
  CHECK_THAT(text, Contains("set title 'Averaged-model test accuracy against virtual time'"));
  CHECK_THAT(text, Contains("set title 'Consensus distance against virtual time'"));
  CHECK_THAT(text, Contains("set xlabel 'virtual time (s): the modelled steps and links'"));
  CHECK_THAT(text, !Contains("wall time"));
}
