// The experiment file of `hearsay sim` (sim/experiment_file.hpp): a sweep of experiments
// in one TOML file. Each test parses a real command line through CLI11 the way the
// executable does, then reads a file written to a temp directory.
#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "sim/experiment_file.hpp"
#include "test_support.hpp"

using namespace hearsay::sim;
using Catch::Matchers::Contains;
using hearsay::testing::TempPath;

namespace {

// `hearsay sim` with its flags bound to cfg, after parsing args (without "hearsay sim").
struct SimCommand {
  SimConfig cfg;
  CLI::App app{"hearsay"};
  CLI::App* cmd = app.add_subcommand("sim");

  explicit SimCommand(std::vector<std::string> args) {
    add_sim_options(*cmd, cfg);
    // With a file, --out may come from it (sim_command makes --out required unless --config).
    cmd->get_option("--out")->required(false);
    args.insert(args.begin(), "sim");
    std::reverse(args.begin(), args.end());  // CLI11 takes a vector last argument first
    app.parse(args);
  }
};

// A directory holding sweep.toml with the given text; removed at the end of the test.
struct SweepFile {
  TempPath dir;
  explicit SweepFile(const std::string& text) {
    std::filesystem::create_directories(dir.path());
    std::ofstream(path()) << text;
  }
  std::filesystem::path path() const { return dir.path() / "sweep.toml"; }
  // "DIR/sweep.toml:LINE", as errors name a place in the file.
  std::string at(int line) const { return path().string() + ":" + std::to_string(line); }
};

std::vector<Experiment> load(const SweepFile& file, std::vector<std::string> args = {}) {
  SimCommand sim(std::move(args));
  return load_experiment_file(file.path(), *sim.cmd, sim.cfg);
}

// What loading throws (it must be std::invalid_argument), or "" when it loads.
std::string load_error(const SweepFile& file, std::vector<std::string> args = {}) {
  try {
    load(file, std::move(args));
    return "";
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
}

const char* const kSweep = R"(# defaults of every experiment
peers = 8
algo = ["gossip", "dpsgd", "allreduce"]
model = "lenet"
epochs = 3
link = "1gbit,1ms"
out = "out/sweep"
peer-arg = ["--round-timeout", "3s"]

[[experiment]]
name = "no-faults"

[[experiment]]
name = "slow-peer"
faults = "slow:2:3x"
target-acc = 0.83
algo = "gossip,sgp"
epochs = 5
)";

}  // namespace

TEST_CASE("experiment file: a sweep gives its experiments in file order", "[experiment-file]") {
  SweepFile file(kSweep);
  const std::vector<Experiment> sweep = load(file);
  REQUIRE(sweep.size() == 2);

  const Experiment& plain = sweep[0];
  CHECK(plain.name == "no-faults");
  CHECK(plain.config.out == (std::filesystem::path("out/sweep") / "no-faults").string());
  CHECK(plain.config.peers == 8);
  CHECK(plain.config.algos == std::vector<std::string>{"gossip", "dpsgd", "allreduce"});
  CHECK(plain.config.training.model == "lenet");
  CHECK(plain.config.training.epochs == 3);
  CHECK(plain.config.link == "1gbit,1ms");
  CHECK(plain.config.peer_args == std::vector<std::string>{"--round-timeout", "3s"});
  CHECK(plain.config.faults.empty());
  CHECK_FALSE(plain.config.target_acc.has_value());
  CHECK(plain.config.training.batch ==
        SimConfig{}.training.batch);  // keys not in the file keep their defaults

  const Experiment& slow = sweep[1];
  CHECK(slow.name == "slow-peer");
  CHECK(slow.config.out == (std::filesystem::path("out/sweep") / "slow-peer").string());
  CHECK(slow.config.faults == "slow:2:3x");
  REQUIRE(slow.config.target_acc.has_value());
  CHECK(*slow.config.target_acc == Approx(0.83));
  // The experiment's own values replace the top level's; the rest are inherited.
  CHECK(slow.config.algos == std::vector<std::string>{"gossip", "sgp"});
  CHECK(slow.config.training.epochs == 5);
  CHECK(slow.config.link == "1gbit,1ms");
  CHECK(slow.config.peer_args == std::vector<std::string>{"--round-timeout", "3s"});
}

TEST_CASE("experiment file: without [[experiment]] it is one experiment writing to out",
          "[experiment-file]") {
  SweepFile file("algo = \"gossip,dpsgd\"\nout = \"out/one\"\nno-progress = true\n");
  const std::vector<Experiment> sweep = load(file);
  REQUIRE(sweep.size() == 1);
  CHECK(sweep[0].name.empty());
  CHECK(sweep[0].config.out == "out/one");
  CHECK(sweep[0].config.algos == std::vector<std::string>{"gossip", "dpsgd"});
  CHECK(sweep[0].config.no_progress);
}

TEST_CASE("experiment file: every key sets its setting", "[experiment-file]") {
  SweepFile file(R"(
peers = 4
algo = "sgp"
graph = "ring"
model = "mlp"
epochs = 2
batch = 16
lr = 0.05
momentum = 0.5
seed = 7
data = "synthetic"
partition = "by-label"
faults = "kill:1@2s"
link = "100mbit,5ms"
step-time = "60ms"
overlap = true
target-acc = 0.8
repeat = 2
eval-every = 0.5
out = "o"
binary = "/opt/hearsay"
peer-arg = "--overlap"
peer-command = "python3 'my dir/train.py' --width 64"
run-timeout = 60
no-progress = true
time-budget = "1.5m"
)");
  const SimConfig c = load(file).at(0).config;
  CHECK(c.peers == 4);
  CHECK(c.algos == std::vector<std::string>{"sgp"});
  CHECK(c.graph == "ring");
  CHECK(c.training.model == "mlp");
  CHECK(c.training.epochs == 2);
  CHECK(c.training.batch == 16);
  CHECK(c.training.lr == Approx(0.05f));
  CHECK(c.training.momentum == Approx(0.5f));
  CHECK(c.training.seed == 7u);
  CHECK(c.training.data == "synthetic");
  CHECK(c.training.partition == "by-label");
  CHECK(c.faults == "kill:1@2s");
  CHECK(c.link == "100mbit,5ms");
  CHECK(c.step_time == "60ms");
  CHECK(c.overlap);
  CHECK(c.target_acc.value_or(0) == Approx(0.8));
  CHECK(c.repeat == 2);
  CHECK(c.eval_every == Approx(0.5));
  CHECK(c.out == "o");
  CHECK(c.binary == "/opt/hearsay");
  CHECK(c.peer_args == std::vector<std::string>{"--overlap"});
  CHECK(c.peer_command == "python3 'my dir/train.py' --width 64");
  CHECK(c.run_timeout_s == Approx(60));
  CHECK(c.no_progress);
  // A duration, as hearsay peer's --time-budget; a plain number is seconds, as it was.
  CHECK(c.time_budget_s() == Approx(90));
  SweepFile seconds("out = \"o\"\ntime-budget = 45\n");
  CHECK(load(seconds).at(0).config.time_budget_s() == Approx(45));
}

TEST_CASE("experiment file: flags on the command line win over the file", "[experiment-file]") {
  SweepFile file(kSweep);
  SimCommand sim(
      {"--epochs", "7", "--algo", "local", "--out", "cli-out", "--peer-arg", "--x", "--peers", "6"});
  const std::vector<Experiment> sweep = load_experiment_file(file.path(), *sim.cmd, sim.cfg);
  REQUIRE(sweep.size() == 2);
  for (const Experiment& e : sweep) {
    INFO(e.name);
    CHECK(e.config.training.epochs == 7);  // over the top level and the experiment's table
    CHECK(e.config.algos == std::vector<std::string>{"local"});
    CHECK(e.config.peers == 6);
    CHECK(e.config.peer_args == std::vector<std::string>{"--x"});
    CHECK(e.config.link == "1gbit,1ms");  // not on the command line: from the file
    CHECK(e.config.out == (std::filesystem::path("cli-out") / e.name).string());
  }
  CHECK(sweep[1].config.faults == "slow:2:3x");
  // Neither the command's config nor its options are changed by reading the file.
  CHECK(sim.cfg.faults.empty());
  CHECK(sim.cfg.link.empty());
  CHECK(sim.cfg.out == "cli-out");
  CHECK(sim.cmd->get_option("--link")->count() == 0);
}

TEST_CASE("experiment file: every flag of hearsay sim is a key", "[experiment-file]") {
  SweepFile file("out = \"o\"\nnot-a-flag = 1\n");
  const std::string message = load_error(file);
  const std::string list_start = "(known keys: ";
  const auto begin = message.find(list_start);
  REQUIRE(begin != std::string::npos);
  std::set<std::string> keys;
  std::istringstream list(
      message.substr(begin + list_start.size(), message.rfind(')') - begin - list_start.size()));
  for (std::string key; std::getline(list >> std::ws, key, ',');) keys.insert(key);
  SimCommand sim({});
  for (const CLI::Option* option : sim.cmd->get_options()) {
    for (const std::string& flag : option->get_lnames()) {
      if (flag == "help" || flag == "config") continue;  // --config names the file itself
      INFO(flag);
      CHECK(keys.count(flag) == 1);
    }
  }
}

TEST_CASE("experiment file: an unknown key names the key, the file and line", "[experiment-file]") {
  SweepFile typo("out = \"o\"\n\nepoch = 3\n");
  const std::string message = load_error(typo);
  CHECK_THAT(message, Contains(typo.at(3) + ": unknown key 'epoch'"));
  CHECK_THAT(message, Contains("did you mean 'epochs'?"));
  CHECK_THAT(message, Contains("known keys: peers, algo,"));

  SweepFile underscored("out = \"o\"\ntarget_acc = 0.8\n");
  CHECK_THAT(load_error(underscored), Contains(underscored.at(2) + ": unknown key 'target_acc'"));
  CHECK_THAT(load_error(underscored), Contains("write 'target-acc'"));

  SweepFile in_table("out = \"o\"\n[[experiment]]\nname = \"a\"\nfautls = \"\"\n");
  CHECK_THAT(load_error(in_table), Contains(in_table.at(4) + ": unknown key 'fautls' in an [[experiment]]"));
  CHECK_THAT(load_error(in_table), Contains("did you mean 'faults'?"));

  SweepFile out_in_table("out = \"o\"\n[[experiment]]\nname = \"a\"\nout = \"b\"\n");
  CHECK_THAT(load_error(out_in_table),
             Contains(out_in_table.at(4) + ": 'out' is the directory of the whole"));
  SweepFile name_on_top("name = \"a\"\nout = \"o\"\n");
  CHECK_THAT(load_error(name_on_top), Contains(name_on_top.at(1) + ": 'name' names one experiment"));
}

TEST_CASE("experiment file: a value of the wrong type names key, expected kind and line",
          "[experiment-file]") {
  SweepFile text("out = \"o\"\npeers = \"three\"\n");
  CHECK_THAT(load_error(text), Contains(text.at(2) + ": 'peers' must be an integer, not a string"));
  SweepFile numbers("out = \"o\"\n[[experiment]]\nname = \"a\"\nalgo = [1, 2]\n");
  CHECK_THAT(load_error(numbers),
             Contains(numbers.at(4) + ": 'algo' must be a string or an array of strings, not an array"));
  SweepFile fast("out = \"o\"\nlr = \"fast\"\n");
  CHECK_THAT(load_error(fast), Contains(fast.at(2) + ": 'lr' must be a number, not a string"));
  SweepFile flag("out = \"o\"\nno-progress = 1\n");
  CHECK_THAT(load_error(flag), Contains(flag.at(2) + ": 'no-progress' must be a boolean"));
  // As with the flags, a list cannot be empty.
  SweepFile cleared("out = \"o\"\npeer-arg = [\"--x\"]\n[[experiment]]\nname = \"a\"\npeer-arg = []\n");
  CHECK_THAT(load_error(cleared), Contains(cleared.at(5) + ": 'peer-arg' = [] gives no value"));
  SweepFile table("out = \"o\"\n[model]\nname = \"lenet\"\n");
  CHECK_THAT(load_error(table), Contains("'model' must be a string, not a table"));
}

TEST_CASE("experiment file: values pass the flags' validators", "[experiment-file]") {
  SweepFile zero_peers("out = \"o\"\npeers = 0\n");
  const std::string peers = load_error(zero_peers);
  CHECK_THAT(peers, Contains(zero_peers.at(2) + ": 'peers'"));
  CHECK_THAT(peers, Contains("--peers"));

  SweepFile negative(
      "out = \"o\"\n[[experiment]]\nname = \"a\"\n[[experiment]]\nname = \"b\"\nepochs = -1\n");
  CHECK_THAT(load_error(negative), Contains(negative.at(6) + ": 'epochs'"));

  SweepFile huge("out = \"o\"\npeers = 99999999999\n");  // a TOML integer, too big for --peers
  CHECK_THAT(load_error(huge), Contains(huge.at(2) + ": 'peers'"));

  SweepFile slow_steps("out = \"o\"\nstep-time = \"fast\"\n");
  CHECK_THAT(load_error(slow_steps), Contains("--step-time") && Contains("fast"));
  SweepFile long_steps("out = \"o\"\nstep-time = \"2m\"\n");
  CHECK_THAT(load_error(long_steps), Contains("--step-time"));

  // A value the command line overrides is still checked: a file with an error runs nothing.
  CHECK_THAT(load_error(zero_peers, {"--peers", "4"}), Contains(zero_peers.at(2) + ": 'peers'"));
}

TEST_CASE("experiment file: experiments need a unique directory name", "[experiment-file]") {
  SweepFile missing("out = \"o\"\n[[experiment]]\nname = \"a\"\n\n[[experiment]]\nepochs = 2\n");
  CHECK_THAT(load_error(missing), Contains(missing.at(5) + ": this [[experiment]] has no name"));

  SweepFile twice("out = \"o\"\n[[experiment]]\nname = \"a\"\n[[experiment]]\nname = \"a\"\n");
  const std::string duplicate = load_error(twice);
  CHECK_THAT(duplicate, Contains(twice.at(5) + ": 'name' \"a\" is already the name of the experiment at " +
                                 twice.at(3)));

  for (const char* bad : {"a/b", "..", "", "x y"}) {
    SweepFile invalid(std::string("out = \"o\"\n[[experiment]]\nname = \"") + bad + "\"\n");
    INFO(bad);
    CHECK_THAT(load_error(invalid),
               Contains(invalid.at(3) + ": 'name' \"" + bad + "\" is not a directory name"));
  }
  SweepFile number("out = \"o\"\n[[experiment]]\nname = 3\n");
  CHECK_THAT(load_error(number), Contains(number.at(3) + ": 'name' must be a string, not an integer"));

  SweepFile single_table("out = \"o\"\n[experiment]\nname = \"a\"\n");
  CHECK_THAT(load_error(single_table), Contains("'experiment' must be tables written [[experiment]]"));
}

TEST_CASE("experiment file: syntax errors, a missing file and a missing out", "[experiment-file]") {
  SweepFile syntax("out = \"o\"\nepochs = = 3\n");
  const std::string message = load_error(syntax);
  CHECK_THAT(message, Contains(syntax.at(2) + ":"));
  CHECK_THAT(message, Contains("not valid TOML"));

  TempPath nowhere(".toml");
  SimCommand sim({});
  try {
    load_experiment_file(nowhere.path(), *sim.cmd, sim.cfg);
    FAIL("a missing experiment file was accepted");
  } catch (const std::invalid_argument& e) {
    CHECK_THAT(e.what(), Contains("cannot read experiment file '" + nowhere.str() + "'"));
  }

  SweepFile no_out("[[experiment]]\nname = \"a\"\n");
  CHECK_THAT(load_error(no_out),
             Contains("no out: give --out or out = \"DIR\" in " + no_out.path().string()));
  CHECK(load(no_out, {"--out", "cli"}).at(0).config.out == (std::filesystem::path("cli") / "a").string());
}

TEST_CASE("experiment file: hearsay sim --config runs every experiment into its own directory",
          "[experiment-file][process]") {
  TempPath dir;
  std::filesystem::create_directories(dir.path());
  const auto out = dir.path() / "out";
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir.path() / name) << text;
    return (dir.path() / name).string();
  };
  const std::string common =
      "peers = 3\nalgo = \"allreduce\"\nmodel = \"mlp\"\nepochs = 1\ndata = \"synthetic\"\n"
      "no-progress = true\nout = \"" +
      out.string() + "\"\n";
  const auto sweep = write("sweep.toml", common +
                                             "[[experiment]]\nname = \"plain\"\n"
                                             "[[experiment]]\nname = \"slow\"\nfaults = \"slow:1:2x\"\n");
  const auto r = hearsay::testing::run_hearsay({"sim", "--config", sweep, "--peers", "2"});
  INFO(r.all());
  CHECK(r.status == 0);
  for (const std::string name : {"plain", "slow"}) {
    const auto summary = nlohmann::json::parse(hearsay::testing::read_file(out / name / "summary.json"));
    CHECK(summary["peers"] == 2);  // the flag wins over the file
    REQUIRE(summary["runs"].size() == 1);
    CHECK(summary["runs"][0]["status"] == "ok");
    CHECK(summary["faults"] == (name == "slow" ? "slow:1:2x" : ""));
  }

  // A bad experiment anywhere stops the sweep before its first run.
  const auto bad = write("bad.toml", common +
                                         "[[experiment]]\nname = \"first\"\n"
                                         "[[experiment]]\nname = \"second\"\nfaults = \"kill:7@1s\"\n");
  std::filesystem::remove_all(out);
  const auto refused = hearsay::testing::run_hearsay({"sim", "--config", bad});
  CHECK(refused.status == 2);
  CHECK_THAT(refused.all(), Contains("experiment 'second'") && Contains("kill:7@1s"));
  CHECK_FALSE(std::filesystem::exists(out / "first"));
}
