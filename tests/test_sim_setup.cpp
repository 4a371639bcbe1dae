// How the simulator sets its peers up: link flags for --link and link faults, the
// control files (partitions, late slow faults, the start hold), and the peers' command
// lines.
#include <catch2/catch.hpp>
#include <fstream>

#include "model/device.hpp"
#include "peer_config_test_util.hpp"
#include "sim/peer_record.hpp"
#include "sim/peer_setup.hpp"
#include "sim/sim_config.hpp"

using namespace hearsay;
using namespace hearsay::sim;

namespace {

std::vector<std::string> link_args(const std::string& link, const std::string& faults, int rank) {
  return link_arguments(link, parse_faults(faults), rank);
}

// Whether `args` holds `flag` followed by `value`.
bool has(const std::vector<std::string>& args, const std::string& flag, const std::string& value) {
  for (std::size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == flag && args[i + 1] == value) return true;
  return false;
}

}  // namespace

TEST_CASE("sim setup: --link and link faults become each peer's link flags", "[sim-setup]") {
  CHECK(link_args("", "", 0).empty());
  CHECK(link_args("", "kill:1@3s", 0).empty());
  CHECK(link_args("1gbit,1ms", "", 2) ==
        std::vector<std::string>{"--link", "1gbit,1ms", "--link-others", "1gbit,1ms"});
  // The peer with its own link uses it; every other peer emulates the path to it.
  const std::string fault = "link:3:1mbit,20ms,loss=0.05";
  const auto own = link_args("1gbit,1ms", fault, 3);
  CHECK(has(own, "--link", "1mbit,20ms,loss=0.05"));
  CHECK(has(own, "--link-others", "1gbit,1ms"));
  const auto other = link_args("1gbit,1ms", fault, 0);
  CHECK(has(other, "--link", "1gbit,1ms"));
  CHECK(has(other, "--link-peer", "rank3=1mbit,20ms,loss=0.05"));
  const auto no_global = link_args("", fault, 1);
  CHECK(no_global == std::vector<std::string>{"--link-peer", "rank3=1mbit,20ms,loss=0.05"});
}

TEST_CASE("sim setup: control files follow partitions and late slow faults", "[sim-setup]") {
  const auto faults = parse_faults("partition:0|1@10s..20s; slow:2:3x@15s; slow:3:2x");
  check_faults(faults, 4);
  const auto at = [&](double s) {
    return controls_at(
        faults, 4, [&](const FaultTime& t) { return t.unit == FaultTime::Unit::seconds && s >= t.value; });
  };
  const auto before = at(5);
  REQUIRE(before.size() == 4);
  for (const auto& c : before) CHECK(c.blocked.empty());
  CHECK(before[3].slowdown == 2.0);  // slow from the start
  CHECK_FALSE(before[2].slowdown);

  // Three groups: {0}, {1} and the unlisted {2, 3}.
  const auto during = at(16);
  CHECK(during[0].blocked == std::vector<std::string>{"rank1", "rank2", "rank3"});
  CHECK(during[1].blocked == std::vector<std::string>{"rank0", "rank2", "rank3"});
  CHECK(during[2].blocked == std::vector<std::string>{"rank0", "rank1"});
  CHECK(during[3].blocked == during[2].blocked);
  CHECK(during[2].slowdown == 3.0);

  const auto healed = at(20);
  for (const auto& c : healed) CHECK(c.blocked.empty());
  CHECK(healed[2].slowdown == 3.0);
}

TEST_CASE("sim setup: a peer's command line carries its rank, faults and evaluation mode", "[sim-setup]") {
  SimConfig cfg;
  cfg.peers = 4;
  cfg.link = "1gbit,1ms";
  cfg.peer_args = {"--round-timeout", "3s"};
  const auto faults = parse_faults("slow:1:3x; partition:0-1|2-3@1ep..2ep");
  const auto sync = peer_arguments(cfg, faults, "/bin/hearsay", "allreduce", 1, 7, "run-x", "/tmp/run");
  CHECK(sync[0] == "/bin/hearsay");
  CHECK(has(sync, "--rank", "1"));
  CHECK(has(sync, "--seed", "7"));
  CHECK(has(sync, "--slowdown", "3"));
  CHECK(has(sync, "--control-file", "/tmp/run/peer1.control"));
  CHECK(has(sync, "--ready-file", "/tmp/run/peer1.ready.json"));
  // Every peer has one, faults or not: its hold starts the peers together.
  const auto plain = peer_arguments(SimConfig{}, {}, "/bin/hearsay", "gossip", 2, 7, "run-x", "/tmp/run");
  CHECK(has(plain, "--control-file", "/tmp/run/peer2.control"));
  CHECK(has(sync, "--link", "1gbit,1ms"));
  CHECK(has(sync, "--checkpoint", "/tmp/run/peer1"));
  CHECK(std::find(sync.begin(), sync.end(), "--snapshot-every") != sync.end());
  CHECK(sync[sync.size() - 2] == "--round-timeout");  // the user's own arguments come last: they win

  const auto async = peer_arguments(cfg, faults, "/bin/hearsay", "gossip", 0, 7, "run-x", "/tmp/run");
  CHECK_FALSE(has(async, "--slowdown", "3"));
  CHECK(std::find(async.begin(), async.end(), "--snapshot-every") == async.end());
  CHECK(evaluated_at_exact_steps("dpsgd", false));
  CHECK(evaluated_at_exact_steps("sgp", false));
  CHECK_FALSE(evaluated_at_exact_steps("sgp", true));  // with overlap its peers drift apart
  CHECK(evaluated_at_exact_steps("allreduce", true));
  CHECK_FALSE(evaluated_at_exact_steps("adpsgd", false));
  CHECK(std::find(async.begin(), async.end(), "--overlap") == async.end());
  CHECK(std::find(async.begin(), async.end(), "--min-step-time") == async.end());

  SimConfig paced = cfg;
  paced.overlap = true;
  paced.step_time = "60ms";
  const auto sgp = peer_arguments(paced, faults, "/bin/hearsay", "sgp", 2, 7, "run-x", "/tmp/run");
  CHECK(std::find(sgp.begin(), sgp.end(), "--overlap") != sgp.end());
  CHECK(has(sgp, "--min-step-time", "60ms"));
  CHECK(std::find(sgp.begin(), sgp.end(), "--snapshot-every") == sgp.end());
  const auto baseline = peer_arguments(paced, faults, "/bin/hearsay", "allreduce", 2, 7, "run-x", "/tmp/run");
  CHECK(std::find(baseline.begin(), baseline.end(), "--overlap") == baseline.end());  // stays synchronous
  CHECK(has(baseline, "--min-step-time", "60ms"));

  // BatchNorm's statistics are mixed unless the sweep says otherwise; the peers are told.
  CHECK(std::find(sgp.begin(), sgp.end(), "--bn-stats") == sgp.end());
  SimConfig local = cfg;
  local.bn_stats = "local";
  const auto kept = peer_arguments(local, faults, "/bin/hearsay", "dpsgd", 1, 7, "run-x", "/tmp/run");
  CHECK(has(kept, "--bn-stats", "local"));
}

TEST_CASE("sim setup: a kill or restart in epochs pauses its peer at the step the run reaches it",
          "[sim-setup]") {
  // 8 peers of batch 32 over 60,000 examples: the run trains 256 samples a step of all peers,
  // so 1.5 epochs are 351.56... steps each, rounded up.
  const auto faults = parse_faults("kill:3@1.5ep; restart:3@2ep; kill:2@30s; slow:1:2x@1ep; kill:0@0ep");
  CHECK(pause_step(faults[0], 60000, 8, 32) == 352);
  CHECK(pause_step(faults[1], 60000, 8, 32) == 469);  // 468.75
  CHECK_FALSE(pause_step(faults[2], 60000, 8, 32));   // in seconds: the clock, not a step
  CHECK_FALSE(pause_step(faults[3], 60000, 8, 32));   // a control-file fault: nothing to deliver
  CHECK(pause_step(faults[4], 60000, 8, 32) == 1);    // at least one step
  // Exact multiples are not rounded up: 1 epoch of 256 examples over 2 peers of batch 8.
  CHECK(pause_step(parse_faults("kill:1@1ep")[0], 256, 2, 8) == 16);
}

TEST_CASE("sim setup: peers train where --device and --devices say, resolved once on this machine",
          "[sim-setup][device]") {
  SimConfig cfg;
  cfg.device = "cpu";
  CHECK_THAT(resolve_peer_devices(cfg), Catch::Matchers::Contains("peers on the CPU (asked for)"));
  CHECK(has(peer_arguments(cfg, {}, "/bin/hearsay", "gossip", 3, 7, "run-x", "/tmp/run"), "--device", "cpu"));
  // Spread over GPUs rank by rank, as resolve_peer_devices fills it on a machine with two.
  cfg.peer_device = {"cuda:0", "cuda:1"};
  CHECK(has(peer_arguments(cfg, {}, "/bin/hearsay", "gossip", 3, 7, "run-x", "/tmp/run"), "--device",
            "cuda:1"));
  CHECK(has(peer_arguments(cfg, {}, "/bin/hearsay", "gossip", 4, 7, "run-x", "/tmp/run"), "--device",
            "cuda:0"));

  std::string why_none;
  const int gpus = hearsay::cuda_device_count(why_none);
  cfg.device = "auto";
  cfg.devices = {0, 1};
  if (gpus == 0) {
    CHECK_THAT(resolve_peer_devices(cfg), Catch::Matchers::Contains("peers on the CPU (auto: " + why_none));
    CHECK(cfg.peer_device == std::vector<std::string>{"cpu"});
    cfg.device = "cuda";
    CHECK_THROWS_AS(resolve_peer_devices(cfg), hearsay::DeviceUnavailable);
  } else {
    cfg.devices = {0, gpus};  // one past the last
    CHECK_THROWS_WITH(resolve_peer_devices(cfg), Catch::Matchers::Contains("--devices: no CUDA device"));
    cfg.devices = {0};
    resolve_peer_devices(cfg);
    CHECK(cfg.peer_device == std::vector<std::string>{"cuda:0"});
  }
  cfg.device = "tpu";
  cfg.out = "/tmp/unused";
  CHECK_THROWS_WITH(validate(cfg), Catch::Matchers::Contains("--device 'tpu' is not one of"));
}

TEST_CASE("sim setup: the values a peer is handed parse back exactly as the sweep gave them", "[sim-setup]") {
  // std::to_string's six decimals used to reach the peers: --lr 2e-7 as 0.000000, 2.5e-6
  // as 0.000003 (20% high), an eval interval of 1/3 epoch as 0.333333.
  const float lr = GENERATE(2e-7f, 2.5e-6f, 0.1f, 0.0123456789f);
  INFO("lr " << lr);
  SimConfig cfg;
  cfg.peers = 2;
  cfg.training.lr = lr;
  cfg.training.momentum = 0.987654321f;
  cfg.eval_every = 1.0 / 3.0;
  const auto faults = parse_faults("slow:1:1.1x");
  const auto args = peer_arguments(cfg, faults, "/bin/hearsay", "allreduce", 1, 7, "run-x", "/tmp/run");
  // Parsed by the peer's own parser, as a peer process (and the virtual engine) parses it.
  const auto first = std::find(args.begin(), args.end(), std::string("peer"));
  REQUIRE(first != args.end());
  const PeerConfig peer = peer_config_test::parse_peer({first + 1, args.end()});
  CHECK(peer.train.lr == cfg.training.lr);
  CHECK(peer.train.momentum == cfg.training.momentum);
  CHECK(peer.checkpoint.snapshot_every == cfg.eval_every);
  CHECK(peer.emulation.slowdown == 1.1);
}

TEST_CASE("sim setup: the peers' training settings, every one of them, reach the peers as given",
          "[sim-setup]") {
  // Every training flag set away from its default: training_arguments must write each, and
  // the peer's parser must read back the same settings (operator== over every field).
  SimConfig cfg;
  cfg.peers = 3;
  TrainingSettings& t = cfg.training;
  t.model = "mlp";
  t.epochs = 0.37;
  t.batch = 17;
  t.lr = 2.5e-6f;
  t.momentum = 0.95f;
  t.weight_decay = 3.3e-4f;
  t.nesterov = true;
  t.optimizer = "adamw";
  t.lr_schedule = "step:30:0.1";
  t.data = "synthetic";
  t.partition = "dirichlet:0.3";
  cfg.distinct_init = true;
  cfg.peer_device = {"cpu"};
  const auto args = peer_arguments(cfg, {}, "/bin/hearsay", "gossip", 2, 11, "run-x", "/tmp/run");
  const auto first = std::find(args.begin(), args.end(), std::string("peer"));
  REQUIRE(first != args.end());
  const PeerConfig peer = peer_config_test::parse_peer({first + 1, args.end()});
  TrainingSettings expected = t;
  expected.seed = 11;  // the repeat's
  expected.threads = 1;
  expected.device = "cpu";
  expected.init_seed = 11 + 7919 * 3;
  CHECK(peer.train == expected);

  // Every flag add_training_flags declares is written when its setting is not the default.
  expected.init_seed = 5;
  const auto written = training_arguments(expected);
  CLI::App app;
  TrainingSettings bound;
  add_training_flags(app, bound);
  for (const CLI::Option* option : app.get_options()) {
    if (option == app.get_help_ptr()) continue;
    const std::string flag = "--" + option->get_lnames().front();
    INFO(flag);
    CHECK(std::find(written.begin(), written.end(), flag) != written.end());
  }
  std::vector<std::string> reversed(written.rbegin(), written.rend());
  app.parse(reversed);
  CHECK(bound == expected);
}

TEST_CASE("sim: the training flags are hearsay peer's, with the simulator's defaults", "[sim-setup]") {
  SimConfig cfg;
  CLI::App app;
  add_sim_options(app, cfg);
  CHECK(cfg.training == sim_training_defaults());
  std::vector<std::string> args = {"--optimizer",   "adamw",    "--weight-decay", "0.01",
                                   "--lr-schedule", "constant", "--nesterov"};
  std::reverse(args.begin(), args.end());
  app.parse(args);
  CHECK(cfg.training.optimizer == "adamw");
  CHECK(cfg.training.weight_decay == 0.01f);
  CHECK(cfg.training.lr_schedule == "constant");
  CHECK(cfg.training.nesterov);
  // The simulator's own meanings of these stay its own.
  CHECK(app.get_option("--threads")->get_description().find("virtual") != std::string::npos);
  CHECK(app.get_option("--device")->get_description().find("--devices") != std::string::npos);
}

TEST_CASE("sim setup: --http gives each rank a port of its own, listed as Prometheus targets",
          "[sim-setup]") {
  SimConfig cfg;
  cfg.peers = 3;
  cfg.out = "/tmp/out";
  CHECK(prometheus_targets(cfg, "run-x", "sgp").empty());
  const auto none = peer_arguments(cfg, {}, "/bin/hearsay", "sgp", 1, 7, "run-x", "/tmp/run");
  CHECK(std::find(none.begin(), none.end(), "--http") == none.end());

  cfg.http_port = 9400;
  for (int r = 0; r < 3; ++r)
    CHECK(has(peer_arguments(cfg, {}, "/bin/hearsay", "sgp", r, 7, "run-x", "/tmp/run"), "--http",
              "127.0.0.1:" + std::to_string(9400 + r)));
  const nlohmann::json targets = prometheus_targets(cfg, "run-x", "sgp");
  REQUIRE(targets.size() == 3);
  CHECK(targets[2]["targets"] == nlohmann::json::array({"127.0.0.1:9402"}));
  CHECK(targets[2]["labels"] ==
        nlohmann::json({{"run", "run-x"}, {"rank", "2"}, {"host", "127.0.0.1"}, {"algorithm", "sgp"}}));
  CHECK_NOTHROW(validate(cfg));

  SimConfig high = cfg;
  high.http_port = 65534;  // ranks 0..2 need 65534..65536
  CHECK_THROWS_WITH(validate(high), Catch::Contains("give a port at most 65533"));
  SimConfig virt = cfg;
  virt.engine = "virtual";
  CHECK_THROWS_WITH(validate(virt), Catch::Contains("--engine process"));
  SimConfig shared = cfg;
  shared.http_port = 0;
  shared.peer_args = {"--http", ":9100"};  // one port for every peer
  CHECK_THROWS_WITH(validate(shared), Catch::Contains("give hearsay sim --http PORT"));
}

TEST_CASE("sim setup: --peer-command runs each peer as the user's command with hearsay peer's flags",
          "[sim-setup]") {
  SimConfig cfg;
  cfg.peers = 3;
  cfg.out = "/tmp/out";
  cfg.peer_command = "OMP_NUM_THREADS=1 python3 'my dir/train.py' --width 64";
  const auto run_dir = std::filesystem::temp_directory_path();  // the peer's files must have a home
  const auto args = peer_arguments(cfg, {}, "/bin/hearsay", "dpsgd", 2, 7, "run-x", run_dir);
  // The shell reads the command as written (an assignment, quotes, the script's own
  // flags); hearsay's flags follow as its arguments, "$@", with "peer" as $0.
  REQUIRE(args.size() > 5);
  CHECK(args[0] == "/bin/sh");
  CHECK(args[1] == "-c");
  CHECK(args[2] == "exec OMP_NUM_THREADS=1 python3 'my dir/train.py' --width 64 \"$@\"");
  CHECK(args[3] == "peer");
  CHECK(has(args, "--rank", "2"));
  CHECK(has(args, "--ready-file", (run_dir / "peer2.ready.json").string()));
  CHECK(std::find(args.begin(), args.end(), "/bin/hearsay") == args.end());
  // What the simulator writes as the peer's settings file reads the flags as hearsay peer does.
  std::string toml;
  const PeerConfig peer = parse_peer_command_line(args, &toml);
  CHECK(peer.network.rank == 2);
  CHECK(peer.mixing.algo == "dpsgd");
  CHECK_NOTHROW(validate(cfg));

  SimConfig virt = cfg;
  virt.engine = "virtual";
  CHECK_THROWS_WITH(validate(virt), Catch::Contains("--peer-command is for --engine process"));
  SimConfig blank = cfg;
  blank.peer_command = "  ";
  CHECK_THROWS_WITH(validate(blank), Catch::Contains("--peer-command: the command is empty"));
}

TEST_CASE("sim setup: --compress and --consensus-step reach the peers, for the algorithms that take them",
          "[sim-setup]") {
  SimConfig cfg;
  cfg.peers = 4;
  cfg.out = "/tmp/out";
  cfg.algos = {"dpsgd"};
  cfg.compress = "topk:1%";
  cfg.consensus_step = 0.25;
  const auto args =
      peer_arguments(cfg, {}, "/bin/hearsay", "dpsgd", 1, 7, "run-x", std::filesystem::temp_directory_path());
  CHECK(has(args, "--compress", "topk:1%"));
  CHECK(has(args, "--consensus-step", "0.25"));
  CHECK_NOTHROW(validate(cfg));
  const PeerConfig peer = parse_peer_command_line(args);
  CHECK(peer.mixing.compress == "topk:1%");
  CHECK(peer.mixing.consensus_step == 0.25);
  SimConfig sweep = cfg;
  sweep.algos = {"gossip", "dpsgd"};
  CHECK_NOTHROW(validate(sweep));  // both keep CHOCO's copies, gossip per link
  sweep.algos = {"sgp", "dpsgd"};
  CHECK_THROWS_WITH(validate(sweep), Catch::Contains("--algo sgp sends values"));
  SimConfig values = cfg;
  values.compress = "int8";
  CHECK_THROWS_WITH(validate(values), Catch::Contains("--consensus-step is for compressed differences"));
  values.consensus_step = 0;
  CHECK_NOTHROW(validate(values));
  CHECK(has(peer_arguments(values, {}, "/bin/hearsay", "dpsgd", 1, 7, "run-x",
                           std::filesystem::temp_directory_path()),
            "--compress", "int8"));
  // --no-lookahead reaches CHOCO's dpsgd peers only, and needs one.
  SimConfig paper = cfg;
  paper.no_lookahead = true;
  paper.algos = {"dpsgd", "gossip"};
  CHECK_NOTHROW(validate(paper));
  const auto paper_args = peer_arguments(paper, {}, "/bin/hearsay", "dpsgd", 1, 7, "run-x",
                                         std::filesystem::temp_directory_path());
  CHECK(std::ranges::find(paper_args, "--no-lookahead") != paper_args.end());
  CHECK_FALSE(parse_peer_command_line(paper_args).mixing.lookahead);
  const auto gossip_args = peer_arguments(paper, {}, "/bin/hearsay", "gossip", 1, 7, "run-x",
                                          std::filesystem::temp_directory_path());
  CHECK(std::ranges::find(gossip_args, "--no-lookahead") == gossip_args.end());
  CHECK(std::ranges::find(args, "--no-lookahead") == args.end());  // on by default
  paper.algos = {"gossip"};
  CHECK_THROWS_WITH(validate(paper), Catch::Contains("--no-lookahead is for dpsgd's compressed differences"));
  SimConfig momentum = cfg;  // quasi-global momentum over lagging copies is refused up front
  momentum.momentum_kind = "quasi-global";
  CHECK_THROWS_WITH(validate(momentum), Catch::Contains("use --momentum-kind local"));
  momentum.compress = "int4";
  CHECK_NOTHROW(validate(momentum));
  SimConfig bad = cfg;
  bad.compress = "topk:0%";
  CHECK_THROWS_WITH(validate(bad), Catch::Contains("(0, 100]"));

  // PowerSGD is all-reduce's: it reaches the peers of an allreduce sweep, and a sweep
  // with a graph algorithm is refused, saying what that one takes.
  SimConfig power = cfg;
  power.algos = {"allreduce"};
  power.compress = "powersgd:2";
  power.consensus_step = 0;
  CHECK_NOTHROW(validate(power));
  CHECK(has(peer_arguments(power, {}, "/bin/hearsay", "allreduce", 1, 7, "run-x",
                           std::filesystem::temp_directory_path()),
            "--compress", "powersgd:2"));
  power.algos = {"allreduce", "dpsgd"};
  CHECK_THROWS_WITH(validate(power),
                    Catch::Contains("PowerSGD") && Catch::Contains("--algo dpsgd sends values"));
  power.algos = {"allreduce"};
  power.consensus_step = 0.2;
  CHECK_THROWS_WITH(validate(power), Catch::Contains("--consensus-step is for compressed differences"));

  // PowerGossip is dpsgd's, on an undirected graph: exp (the default) is refused before
  // any peer starts; its consensus step reaches the peers.
  SimConfig pg = cfg;
  pg.algos = {"dpsgd"};
  pg.compress = "powergossip:2";
  pg.consensus_step = 0.5;
  CHECK_THROWS_WITH(validate(pg), Catch::Contains("--graph exp is directed") && Catch::Contains("use ring"));
  pg.graph = "ring";
  CHECK_NOTHROW(validate(pg));
  CHECK(has(
      peer_arguments(pg, {}, "/bin/hearsay", "dpsgd", 1, 7, "run-x", std::filesystem::temp_directory_path()),
      "--consensus-step", "0.5"));
  pg.algos = {"dpsgd", "allreduce"};
  CHECK_THROWS_WITH(validate(pg), Catch::Contains("--algo allreduce sends values"));

  // One spec each: compressed gossip against compressed all-reduce in one sweep.
  SimConfig each = cfg;
  each.algos = {"dpsgd", "allreduce", "gossip"};
  each.compress = "dpsgd=topk:1%,allreduce=powersgd:2";
  each.consensus_step = 0.05;
  CHECK_NOTHROW(validate(each));
  CHECK(compress_for(each, "dpsgd") == "topk:1%");
  CHECK(compress_for(each, "allreduce") == "powersgd:2");
  CHECK(compress_for(each, "gossip") == "f32");
  const auto tmp = std::filesystem::temp_directory_path();
  const auto ar = peer_arguments(each, {}, "/bin/hearsay", "allreduce", 1, 7, "run-x", tmp);
  CHECK(has(ar, "--compress", "powersgd:2"));
  CHECK(std::ranges::find(ar, "--consensus-step") == ar.end());  // CHOCO's only
  CHECK(
      has(peer_arguments(each, {}, "/bin/hearsay", "dpsgd", 1, 7, "run-x", tmp), "--consensus-step", "0.05"));
  const auto g = peer_arguments(each, {}, "/bin/hearsay", "gossip", 1, 7, "run-x", tmp);
  CHECK(std::ranges::find(g, "--compress") == g.end());
  each.compress = "dpsgd=powersgd:2";
  CHECK_THROWS_WITH(validate(each), Catch::Contains("--algo dpsgd sends values"));
  each.compress = "sgp=int8";
  CHECK_THROWS_WITH(validate(each), Catch::Contains("sgp is not in --algo"));
  each.compress = "dpsgd=sign,dpsgd=int4";
  CHECK_THROWS_WITH(validate(each), Catch::Contains("names dpsgd twice"));
  each.compress = "dpsgd=sign,allreduce";
  CHECK_THROWS_WITH(validate(each), Catch::Contains("is not ALGO=SPEC"));
  each.compress = "topk:1%";  // one spec for a sweep with all-reduce: says how to give one each
  CHECK_THROWS_WITH(validate(each), Catch::Contains("dpsgd=topk:1%,allreduce=powersgd:2"));
}

TEST_CASE("sim setup: a Python peer's traceback gives its exception's line as why it ended", "[sim-setup]") {
  const auto log = std::filesystem::temp_directory_path() / "hearsay-traceback-test.log";
  {
    std::ofstream out(log);
    out << "2026-11-28T10:00:00Z info  peer 'rank1' listening\n"
        << "Traceback (most recent call last):\n"
        << "  File \"train.py\", line 40, in <module>\n"
        << "    if not mixer.step(loss.item()):\n"
        << "RuntimeError: all-reduce: peer 'rank5' did not answer within 10 s (it left the run)\n"
        << "\n";
  }
  CHECK(last_error_line(log) ==
        "RuntimeError: all-reduce: peer 'rank5' did not answer within 10 s (it left the run)");
  std::filesystem::remove(log);
}

TEST_CASE("sim setup: a restarted peer's bytes are its lives' added up", "[sim-setup]") {
  // Each life counts its bytes from 0 and starts with a "start" record, writing the file
  // again; the largest count seen (what the simulator took before) dropped the lives
  // before the longest.
  const auto path = std::filesystem::temp_directory_path() / "hearsay-metrics-lives-test.jsonl";
  {
    std::ofstream out(path);
    out << R"({"type":"start"})"
        << "\n"
        << R"({"type":"metrics","step":10,"bytes_sent":1000})"
        << "\n"
        << R"({"type":"metrics","step":20,"bytes_sent":3000})"
        << "\n"
        << R"({"type":"start"})"
        << "\n"
        << R"({"type":"metrics","step":15,"bytes_sent":500})"
        << "\n";
  }
  MetricsTail tail;
  int records = 0;
  tail.read_new(path, [&](const nlohmann::json&) { ++records; });
  CHECK(records == 5);
  CHECK(tail.bytes_sent() == 3500);
  CHECK(tail.step() == 20);
  {
    std::ofstream out(path, std::ios::app);
    out << R"({"type":"metrics","step":30,"bytes_sent":2500})"
        << "\n"
        << R"({"type":"metr)";  // a line half written
  }
  tail.read_new(path, [&](const nlohmann::json&) { ++records; });
  CHECK(records == 6);
  CHECK(tail.bytes_sent() == 5500);
  {
    std::ofstream out(path, std::ios::trunc);  // a third life writes the file again
    out << R"({"type":"start"})"
        << "\n"
        << R"({"type":"metrics","step":31,"bytes_sent":100})"
        << "\n";
  }
  tail.read_new(path, [&](const nlohmann::json&) { ++records; });
  CHECK(records == 8);
  CHECK(tail.bytes_sent() == 5600);
  CHECK(tail.step() == 31);
  std::filesystem::remove(path);
}
