// The configuration of `hearsay peer`: flags, the TOML config file, validation and the
// mapping to the algorithms' options. Each test parses a real argv through CLI11 the way
// the executable does.
#include <filesystem>
#include <iterator>
#include <optional>
#include <set>

#include "peer_config_test_util.hpp"

using namespace peer_config_test;

TEST_CASE("peer config: defaults make a valid insecure gossip peer", "[peer-config]") {
  const PeerConfig cfg = parse_peer(with_base({}));
  CHECK(cfg.network.listen == "tcp://127.0.0.1:7000");
  CHECK(cfg.network.join.empty());
  CHECK(cfg.network.rank == -1);
  CHECK(cfg.network.world == 0);
  CHECK(cfg.network.insecure);
  CHECK(cfg.train.model == "lenet");
  CHECK(cfg.train.device == "auto");
  CHECK(cfg.mixing.algo == "gossip");
  CHECK(cfg.mixing.graph == "ring");
  CHECK(cfg.mixing.gossip_every == 1);
  CHECK(cfg.mixing.always_start_round);
  CHECK(cfg.emulation.slowdown == 1);
  CHECK(cfg.mixing.round_timeout == 2s);
  CHECK(cfg.membership.heartbeat == 1s);
  CHECK(cfg.membership.suspect_after == 3s);
  CHECK(cfg.membership.dead_after == 10s);
  CHECK(cfg.checkpoint.dir.empty());
  CHECK_FALSE(cfg.checkpoint.resume);
  CHECK_NOTHROW(validate(cfg));
  CHECK(peer_id(cfg) == "127.0.0.1:7000");
}

TEST_CASE("peer config: --help lists every flag", "[peer-config]") {
  PeerConfig cfg;
  CLI::App app{"hearsay peer"};
  add_peer_options(app, cfg);
  const std::string help = app.help();
  for (const char* flag : {"--config",
                           "--listen",
                           "--join",
                           "--rank",
                           "--world",
                           "--wait-for-world",
                           "--id",
                           "--keys",
                           "--authorized",
                           "--insecure",
                           "--model",
                           "--epochs",
                           "--batch",
                           "--lr",
                           "--optimizer",
                           "--data",
                           "--partition",
                           "--threads",
                           "--seed",
                           "--device",
                           "--algo",
                           "--graph",
                           "--directed",
                           "--rows",
                           "--degree",
                           "--graph-seed",
                           "--graph-file",
                           "--weights",
                           "--gossip-every",
                           "--fanout",
                           "--round-timeout",
                           "--compress",
                           "--overlap",
                           "--always-start-round",
                           "--skip-when-served",
                           "--heartbeat",
                           "--suspect-after",
                           "--dead-after",
                           "--metrics",
                           "--log-every",
                           "--http",
                           "--ready-file",
                           "--checkpoint",
                           "--checkpoint-every",
                           "--resume",
                           "--slowdown",
                           "--link",
                           "--link-others",
                           "--link-peer"}) {
    INFO(flag);
    CHECK_THAT(help, Contains(flag));
  }
}

TEST_CASE("peer config: durations accept units and plain seconds", "[peer-config]") {
  CHECK(parse_duration("500ms", "--x") == 500ms);
  CHECK(parse_duration("2s", "--x") == 2s);
  CHECK(parse_duration("1.5s", "--x") == 1500ms);
  CHECK(parse_duration("2", "--x") == 2s);
  CHECK(parse_duration("0.25", "--x") == 250ms);
  CHECK(parse_duration("2m", "--x") == 120s);
  CHECK(parse_duration("1h", "--x") == 3600s);
  CHECK(parse_duration("250us", "--x") == 250us);
  for (const char* bad : {"", "s", "ms", "abc", "-1s", "2x", "1.5.3s", "nan", "inf", "2 s"}) {
    INFO("'" << bad << "'");
    CHECK_THROWS_WITH(parse_duration(bad, "--heartbeat"), Contains("--heartbeat") && Contains("500ms"));
  }
  CHECK(format_duration(500ms) == "500ms");
  CHECK(format_duration(2s) == "2s");
  CHECK(format_duration(1500ms) == "1.5s");
  CHECK(format_duration(250us) == "250us");

  const PeerConfig cfg =
      parse_peer(with_base({"--round-timeout", "500ms", "--heartbeat", "0.5", "--suspect-after", "1.5s",
                            "--dead-after", "2m", "--checkpoint-every", "90"}));
  CHECK(cfg.mixing.round_timeout == 500ms);
  CHECK(cfg.membership.heartbeat == 500ms);
  CHECK(cfg.membership.suspect_after == 1500ms);
  CHECK(cfg.membership.dead_after == 120s);
  CHECK(cfg.checkpoint.every == 90s);
  CHECK_THROWS_AS(parse_peer(with_base({"--heartbeat", "2x"})), CLI::ValidationError);

  // In the file: a duration string, a float and an integer (seconds).
  TomlFile file("[mixing]\nround-timeout = \"750ms\"\n[membership]\nheartbeat = 0.5\ndead-after = 20\n");
  const PeerConfig from_file = parse_peer(with_base({"--config", file.str()}));
  CHECK(from_file.mixing.round_timeout == 750ms);
  CHECK(from_file.membership.heartbeat == 500ms);
  CHECK(from_file.membership.dead_after == 20s);
}

TEST_CASE("peer config: every key of the file sets its setting when no flag is given", "[peer-config]") {
  TomlFile file(R"(
listen = "tcp://10.0.0.5:7100"
[network]
join = ["tcp://10.0.0.1:7100#kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk", "tcp://10.0.0.2:7100#kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"]
rank = 3
world = 8
wait-for-world = true
id = "rank3"
keys = "keys/alice"
authorized = "authorized"
insecure = false
[train]
model = "mlp"
epochs = 7
batch = 32
lr = 0.1
momentum = 0.5
weight-decay = 1e-4
nesterov = true
optimizer = "adamw"
lr-schedule = "constant"
data = "synthetic"
partition = "dirichlet:0.5"
threads = 3
seed = 42
device = "cpu"
[mixing]
algo = "dpsgd"
graph = "random-regular"
directed = false
degree = 3
graph-seed = 9
weights = "metropolis"
gossip-every = 4
fanout = 2
round-timeout = "1.5s"
compress = "bf16"
overlap = true
always-start-round = false
[membership]
heartbeat = "200ms"
suspect-after = "1s"
dead-after = "5s"
[output]
metrics = "run.jsonl"
log-every = 2.5
http = ":9100"
ready-file = "peer.ready.json"
[checkpoint]
checkpoint = "ckpt"
checkpoint-every = "10m"
resume = true
[emulation]
slowdown = 2.5
link = "100mbit,5ms"
link-others = "1gbit,1ms,loss=0.01"
link-peer = ["rank1=1mbit,20ms", "rank2=unlimited,0s,loss=0.5"]
)");
  const PeerConfig c = parse_peer({"--config", file.str()});
  CHECK(c.network.listen == "tcp://10.0.0.5:7100");
  CHECK(c.network.join == std::vector<std::string>{"tcp://10.0.0.1:7100#" + std::string(40, 'k'),
                                                  "tcp://10.0.0.2:7100#" + std::string(40, 'k')});
  CHECK(c.network.rank == 3);
  CHECK(c.network.world == 8);
  CHECK(c.network.wait_for_world);
  CHECK(c.network.id == "rank3");
  CHECK(c.network.keys == "keys/alice");
  CHECK(c.network.authorized == "authorized");
  CHECK_FALSE(c.network.insecure);
  CHECK(c.train.model == "mlp");
  CHECK(c.train.epochs == 7);
  CHECK(c.train.batch == 32);
  CHECK(c.train.lr == Approx(0.1f));
  CHECK(c.train.momentum == Approx(0.5f));
  CHECK(c.train.weight_decay == Approx(1e-4f));
  CHECK(c.train.nesterov);
  CHECK(c.train.optimizer == "adamw");
  CHECK(c.train.lr_schedule == "constant");
  CHECK(c.train.data == "synthetic");
  CHECK(c.train.partition == "dirichlet:0.5");
  CHECK(c.train.threads == 3);
  CHECK(c.train.seed == 42);
  CHECK(c.train.device == "cpu");
  CHECK(c.mixing.algo == "dpsgd");
  CHECK(c.mixing.graph == "random-regular");
  CHECK(c.mixing.degree == 3);
  CHECK(c.mixing.graph_seed == 9);
  CHECK(c.mixing.weights == "metropolis");
  CHECK(c.mixing.gossip_every == 4);
  CHECK(c.mixing.fanout == 2);
  CHECK(c.mixing.round_timeout == 1500ms);
  CHECK(c.mixing.compress == "bf16");
  CHECK(c.mixing.overlap);
  CHECK_FALSE(c.mixing.always_start_round);
  CHECK(c.emulation.slowdown == 2.5);
  CHECK(c.emulation.link == "100mbit,5ms");
  CHECK(c.emulation.link_others == "1gbit,1ms,loss=0.01");
  CHECK(c.emulation.link_peers ==
        std::vector<std::string>{"rank1=1mbit,20ms", "rank2=unlimited,0s,loss=0.5"});
  CHECK(c.membership.heartbeat == 200ms);
  CHECK(c.membership.suspect_after == 1s);
  CHECK(c.membership.dead_after == 5s);
  CHECK(c.output.metrics == "run.jsonl");
  CHECK(c.output.log_every == Approx(2.5));
  CHECK(c.output.http == ":9100");
  CHECK(c.output.ready_file == "peer.ready.json");
  CHECK(c.checkpoint.dir == "ckpt");
  CHECK(c.checkpoint.every == 600s);
  CHECK(c.checkpoint.resume);
  CHECK_NOTHROW(validate(c));
}

TEST_CASE("peer config: flags on the command line override the file", "[peer-config]") {
  TomlFile file(
      "[train]\nepochs = 7\nmodel = \"mlp\"\n[mixing]\nround-timeout = \"5s\"\noverlap = true\n"
      "[network]\njoin = [\"tcp://10.0.0.1:7100\"]\n");
  const PeerConfig c = parse_peer(with_base({"--config", file.str(), "--epochs", "3", "--round-timeout",
                                             "250ms", "--join", "tcp://10.0.0.9:7100"}));
  CHECK(c.train.epochs == 3);
  CHECK(c.mixing.round_timeout == 250ms);
  CHECK(c.network.join == std::vector<std::string>{"tcp://10.0.0.9:7100"});
  CHECK(c.train.model == "mlp");  // not given on the command line: from the file
  CHECK(c.mixing.overlap);
  // --config may come after the flags it is overridden by.
  const PeerConfig later = parse_peer({"--epochs", "4", "--listen", "tcp://h:1", "--config", file.str()});
  CHECK(later.train.epochs == 4);
}

TEST_CASE("peer config: an unknown key names the file and line and suggests the closest", "[peer-config]") {
  const std::string typo = config_error("[train]\nepochs = 3\nepoch = 4\n");
  CHECK_THAT(typo, Contains(".toml:3:"));
  CHECK_THAT(typo, Contains("unknown key 'train.epoch'"));
  CHECK_THAT(typo, Contains("did you mean 'train.epochs'?"));

  const std::string top = config_error("\n\nlisen = \"tcp://h:1\"\n");
  CHECK_THAT(top, Contains(".toml:3:"));
  CHECK_THAT(top, Contains("did you mean 'network.listen'?"));

  const std::string wrong_table = config_error("[mixing]\nepochs = 3\n");
  CHECK_THAT(wrong_table, Contains("unknown key 'mixing.epochs'"));
  CHECK_THAT(wrong_table, Contains("'epochs' belongs in [train]"));

  const std::string table = config_error("[trian]\nepochs = 3\n");
  CHECK_THAT(table, Contains("unknown table [trian]"));
  CHECK_THAT(table, Contains("did you mean '[train]'?"));

  const std::string far = config_error("[train]\nzzzzzzzzzz = 1\n");
  CHECK_THAT(far, Contains("unknown key 'train.zzzzzzzzzz'"));
  CHECK_THAT(far, !Contains("did you mean"));

  CHECK_THAT(config_error("epochs = 3\n[train]\nepochs = 4\n"), Contains("given twice"));
}

TEST_CASE("peer config: a value of the wrong type names the key, the expected type and the line",
          "[peer-config]") {
  const std::string text = config_error("[train]\nmodel = \"mlp\"\nbatch = \"three\"\n");
  CHECK_THAT(text, Contains(".toml:3:"));
  CHECK_THAT(text, Contains("'train.batch' must be an integer, not a string"));
  CHECK_THAT(config_error("[train]\nepochs = \"three\"\n"), Contains("'train.epochs' must be a number"));
  CHECK_THAT(config_error("[network]\ninsecure = 1\n"), Contains("'network.insecure' must be a boolean"));
  CHECK_THAT(config_error("[network]\njoin = [1, 2]\n"),
             Contains("'network.join' must be a string or an array of strings, not an array"));
  // The peer's reader and the simulator's are one (base/toml_flags.hpp): an empty list is
  // refused the same way in both.
  CHECK_THAT(config_error("[network]\njoin = []\n"), Contains("'network.join' = [] gives no value"));
  CHECK_THAT(config_error("[membership]\nheartbeat = true\n"),
             Contains("'membership.heartbeat' must be a duration"));
  CHECK_THAT(config_error("train = 3\n"), Contains("'train' must be a table"));
  // Values the flag's own validator refuses are refused from the file too, with the line.
  const std::string range = config_error("\n[train]\nepochs = 0\n");
  CHECK_THAT(range, Contains(".toml:3:"));
  CHECK_THAT(range, Contains("train.epochs"));
  CHECK_THAT(config_error("[mixing]\nround-timeout = \"2 parsecs\"\n"), Contains("mixing.round-timeout"));
}

TEST_CASE("peer config: a missing or malformed file names the path", "[peer-config]") {
  TempPath missing(".toml");
  try {
    parse_peer(with_base({"--config", missing.str()}));
    FAIL("a missing config file was accepted");
  } catch (const CLI::ConfigError& e) {
    CHECK_THAT(std::string(e.what()), Contains(missing.str()));
    CHECK_THAT(std::string(e.what()), Contains("cannot read"));
  }
  const std::string bad = config_error("[train]\nepochs = = 3\n");
  CHECK_THAT(bad, Contains(".toml:2:"));
  CHECK_THAT(bad, Contains("not valid TOML"));
}

TEST_CASE("peer config: each validation rule says what to do", "[peer-config]") {
  // Network.
  CHECK_THAT(problem({"--insecure"}), Contains("--listen is required"));
  CHECK_THAT(problem({"--listen", "tcp://host", "--insecure"}),
             Contains("--listen 'tcp://host' has no port: use tcp://HOST:PORT"));
  CHECK_THAT(problem({"--listen", "host:7000", "--insecure"}),
             Contains("is not an address: use tcp://HOST:PORT"));
  CHECK_THAT(problem({"--listen", "tcp://host:99999", "--insecure"}), Contains("use a port in 1..65535"));
  CHECK_THAT(problem({"--listen", "tcp://:7000", "--insecure"}), Contains("has no host"));
  CHECK_THAT(problem(with_base({"--join", "tcp://seed"})), Contains("--join 'tcp://seed' has no port"));
  CHECK(problem(with_base({"--join", "tcp://seed:7000"})).empty());
  // A CURVE peer must know the seed's key, and a plain one must not be given one: said at
  // once, not after --join-timeout of retries.
  CHECK_THAT(problem(with_base({"--join", "tcp://seed:7000#" + std::string(40, 'k')})),
             Contains("carries a CURVE key, but this peer is --insecure"));
  CHECK_THAT(problem({"--listen", "tcp://127.0.0.1:7000", "--keys", "k", "--authorized", "a", "--join",
                      "tcp://seed:7000"}),
             Contains("the address has no CURVE key: append #KEY"));
  CHECK_THAT(problem(with_base({"--join", "tcp://127.0.0.1:7000"})), Contains("own --listen address"));
  CHECK_THAT(problem(with_base({"--rank", "5", "--world", "5"})),
             Contains("--rank 5 needs --world greater than 5"));
  CHECK_THAT(problem(with_base({"--rank", "1"})), Contains("--rank 1 needs --world N"));
  CHECK_THAT(problem(with_base({"--world", "4"})), Contains("--world 4 needs --rank R"));
  // Port * lets the system choose; the id then cannot come from the port.
  CHECK_THAT(problem({"--listen", "tcp://127.0.0.1:*", "--insecure"}),
             Contains("give --id NAME (or --rank)"));
  CHECK(problem({"--listen", "tcp://127.0.0.1:*", "--insecure", "--id", "p0"}).empty());
  CHECK(problem({"--listen", "ipc:///tmp/peer0.sock", "--insecure"}).empty());  // the id is the path
  CHECK(problem({"--listen", "tcp://127.0.0.1:*", "--insecure", "--rank", "0", "--world", "2"}).empty());
  CHECK_THAT(problem(with_base({"--join", "tcp://seed:*"})), Contains("use a port in 1..65535"));
  CHECK_THAT(problem(with_base({"--id", "a=b"})), Contains("must not contain '='"));
  CHECK_THAT(problem(with_base({"--run", ""})), Contains("--run must be 1 to 255 bytes"));
  // Fixed graphs find their neighbours by rank.
  CHECK_THAT(problem(with_base({"--algo", "dpsgd", "--rank", "1", "--world", "4", "--id", "alice"})),
             Contains("leave --id out"));
  CHECK(problem(with_base({"--algo", "dpsgd", "--rank", "1", "--world", "4", "--id", "rank1"})).empty());
  CHECK(problem(with_base({"--algo", "gossip", "--rank", "1", "--world", "4", "--id", "alice"})).empty());
  CHECK_THAT(problem({"--listen", "tcp://h:1"}), Contains("give --keys DIR --authorized DIR"));
  CHECK_THAT(problem({"--listen", "tcp://h:1", "--keys", "k"}), Contains("--keys needs --authorized DIR"));
  CHECK_THAT(problem({"--listen", "tcp://h:1", "--authorized", "a"}),
             Contains("--authorized needs --keys DIR"));
  CHECK_THAT(problem(with_base({"--keys", "k", "--authorized", "a"})),
             Contains("--insecure cannot be combined"));
  CHECK(problem({"--listen", "tcp://h:1", "--keys", "k", "--authorized", "a"}).empty());
  // Training.
  // The text only: whether the machine has the device is checked when the peer starts.
  CHECK(problem(with_base({"--device", "cuda:0"})).empty());
  CHECK(problem(with_base({"--device", "cuda"})).empty());
  CHECK_THAT(problem(with_base({"--device", "cuda0"})), Contains("--device 'cuda0' is not one of"));
  CHECK_THAT(problem(with_base({"--device", "cuda:-1"})), Contains("--device 'cuda:-1' is not one of"));
  CHECK_THAT(problem(with_base({"--device", "tpu"})), Contains("--device 'tpu' is not one of"));
  CHECK_THAT(problem(with_base({"--lr-schedule", "linear"})), Contains("--lr-schedule"));
  CHECK_THAT(problem(with_base({"--partition", "dirichlet:0.5"})),
             Contains("--partition dirichlet:0.5 needs --rank and --world"));
  CHECK_THAT(problem(with_base({"--partition", "halves", "--rank", "0", "--world", "2"})),
             Contains("--partition"));
  // Gossip.
  CHECK_THAT(problem(with_base({"--algo", "dpsgd"})),
             Contains("--algo dpsgd needs --rank and --world (fixed graphs give every peer a rank)"));
  CHECK_THAT(problem(with_base({"--algo", "allreduce"})),
             Contains("--algo allreduce needs --rank and --world"));
  CHECK_THAT(problem(with_base({"--algo", "push"})), Contains("--algo 'push' is not one of"));
  CHECK(problem(with_base({"--algo", "none"})).empty());
  CHECK(problem(with_base({"--algo", "sgp", "--graph", "exp", "--rank", "0", "--world", "8"})).empty());
  CHECK_THAT(problem(with_base({"--algo", "dpsgd", "--graph", "mesh", "--rank", "0", "--world", "4"})),
             Contains("--graph"));
  CHECK_THAT(problem(with_base({"--algo", "dpsgd", "--graph", "file", "--rank", "0", "--world", "4"})),
             Contains("--graph file needs --graph-file"));
  CHECK_THAT(
      problem(with_base({"--algo", "dpsgd", "--graph", "random-regular", "--rank", "0", "--world", "4"})),
      Contains("needs --degree K"));
  CHECK_THAT(problem(with_base({"--algo", "dpsgd", "--degree", "2", "--rank", "0", "--world", "4"})),
             Contains("--degree is only for --graph random-regular"));
  CHECK_THAT(problem(with_base({"--algo", "dpsgd", "--rows", "2", "--rank", "0", "--world", "4"})),
             Contains("--rows is only for --graph torus"));
  CHECK_THAT(problem(with_base({"--fanout", "4", "--rank", "0", "--world", "4"})),
             Contains("--fanout 4 needs --world greater than 4"));
  CHECK_THAT(problem(with_base({"--round-timeout", "0s"})),
             Contains("--round-timeout must be longer than 0s"));
  // Membership.
  CHECK_THAT(problem(with_base({"--heartbeat", "0"})), Contains("--heartbeat must be longer than 0s"));
  CHECK_THAT(problem(with_base({"--heartbeat", "3s"})),
             Contains("--suspect-after 3s must be longer than --heartbeat 3s"));
  CHECK_THAT(problem(with_base({"--dead-after", "2s"})),
             Contains("--dead-after 2s must be longer than --suspect-after 3s"));
  // Output and checkpoints.
  CHECK_THAT(problem(with_base({"--http", "9100"})), Contains("--http '9100' has no valid port"));
  CHECK(problem(with_base({"--http", ":9100"})).empty());
  CHECK(problem(with_base({"--http", "0.0.0.0:9100"})).empty());
  CHECK_THAT(problem(with_base({"--resume"})), Contains("--resume needs --checkpoint DIR"));
  CHECK(problem(with_base({"--resume", "--checkpoint", "ckpt"})).empty());
  // 0: no periodic checkpoint, only the final one (what hearsay sim asks of peers it never restarts).
  CHECK(problem(with_base({"--checkpoint", "ckpt", "--checkpoint-every", "0"})).empty());
  CHECK_THAT(problem(with_base({"--join-timeout", "0"})), Contains("--join-timeout must be longer than 0s"));
  CHECK_THAT(problem(with_base({"--initial-state", "theirs"})), Contains("--initial-state"));
  CHECK(problem(with_base({"--http", ":0"})).empty());
}

TEST_CASE("peer config: the id is rank<R> with a rank, else HOST:PORT", "[peer-config]") {
  CHECK(peer_id(parse_peer(with_base({"--rank", "2", "--world", "4"}))) == "rank2");
  CHECK(peer_id(parse_peer(with_base({"--rank", "2", "--world", "4", "--id", "x"}))) == "x");
  CHECK(peer_id(parse_peer(with_base({}))) == "127.0.0.1:7000");
  CHECK(rank_peer_id(11) == "rank11");
}

TEST_CASE("peer config: algorithm_options and graph_spec carry the gossip flags", "[peer-config]") {
  const PeerConfig c = parse_peer(with_base({"--algo",
                                             "dpsgd",
                                             "--rank",
                                             "2",
                                             "--world",
                                             "16",
                                             "--gossip-every",
                                             "4",
                                             "--fanout",
                                             "3",
                                             "--round-timeout",
                                             "750ms",
                                             "--compress",
                                             "int8",
                                             "--overlap",
                                             "--weights",
                                             "metropolis",
                                             "--seed",
                                             "77",
                                             "--graph",
                                             "torus",
                                             "--rows",
                                             "4",
                                             "--directed"}));
  const algorithms::AlgorithmOptions o = algorithm_options(c);
  CHECK(o.gossip_every == 4);
  CHECK(o.fanout == 3);
  CHECK(o.round_timeout == 750ms);
  CHECK(o.compress == wire::Dtype::int8);
  CHECK(o.overlap);
  CHECK(o.always_start_round);  // the default; --skip-when-served turns it off
  CHECK_FALSE(algorithm_options(parse_peer(with_base({"--skip-when-served"}))).always_start_round);
  CHECK(algorithm_options(parse_peer(with_base({"--always-start-round"}))).always_start_round);
  CHECK(o.seed == 77);
  CHECK(o.weights == topology::WeightScheme::metropolis);
  const topology::GraphSpec g = graph_spec(c);
  CHECK(g.kind == topology::GraphKind::torus);
  CHECK(g.peers == 16);
  CHECK(g.torus_rows == 4);
  CHECK(g.directed);
  CHECK_NOTHROW(topology::Topology::make(g));

  const algorithms::AlgorithmOptions defaults = algorithm_options(parse_peer(with_base({})));
  CHECK(defaults.compress == wire::Dtype::f32);
  CHECK(defaults.round_timeout == 2s);
  CHECK_FALSE(defaults.overlap);
  CHECK(defaults.weights == topology::WeightScheme::uniform);
  for (const auto& [flag, dtype] : std::vector<std::pair<std::string, wire::Dtype>>{
           {"f32", wire::Dtype::f32}, {"f16", wire::Dtype::f16}, {"bf16", wire::Dtype::bf16}})
    CHECK(algorithm_options(parse_peer(with_base({"--compress", flag}))).compress == dtype);
}

TEST_CASE("peer config: --compress takes CHOCO's compressors for dpsgd, and says what fits otherwise",
          "[peer-config]") {
  const auto dpsgd = [](std::vector<std::string> extra) {
    std::vector<std::string> a{"--algo", "dpsgd", "--rank", "0", "--world", "4"};
    a.insert(a.end(), extra.begin(), extra.end());
    return with_base(a);
  };
  for (const std::string spec : {"topk:1%", "randk:0.5%", "sign", "int4"}) {
    INFO(spec);
    CHECK(problem(dpsgd({"--compress", spec})).empty());
    const auto o = algorithm_options(parse_peer(dpsgd({"--compress", spec})));
    CHECK(o.compressor == spec);
    CHECK(o.compress == wire::Dtype::f32);
  }
  CHECK(algorithm_options(parse_peer(dpsgd({"--compress", "sign", "--consensus-step", "0.2"})))
            .consensus_step == 0.2);
  CHECK(problem(with_base({"--algo", "gossip", "--compress", "topk:1%", "--consensus-step", "0.1"})).empty());
  CHECK_THAT(problem(with_base({"--algo", "sgp", "--rank", "0", "--world", "4", "--compress", "topk:1%"})),
             Catch::Contains("--algo sgp sends values") && Catch::Contains("--compress f16, bf16 or int8"));
  CHECK_THAT(problem(dpsgd({"--consensus-step", "0.3"})),
             Catch::Contains("--consensus-step is for compressed differences"));
  CHECK_THROWS_WITH(parse_peer(dpsgd({"--compress", "topk:200%"})), Catch::Contains("(0, 100]"));
  CHECK_THROWS_WITH(parse_peer(dpsgd({"--compress", "zip"})),
                    Catch::Contains("f32, f16, bf16, int8") && Catch::Contains("topk:P%"));
  CHECK_THROWS(parse_peer(dpsgd({"--compress", "sign", "--consensus-step", "1.5"})));
  // The look-ahead is CHOCO D-PSGD's, on unless turned off; off elsewhere is a mistake.
  CHECK(algorithm_options(parse_peer(dpsgd({"--compress", "topk:1%"}))).lookahead);
  CHECK_FALSE(algorithm_options(parse_peer(dpsgd({"--compress", "topk:1%", "--no-lookahead"}))).lookahead);
  CHECK(problem(dpsgd({"--compress", "sign", "--no-lookahead"})).empty());
  CHECK_THAT(problem(dpsgd({"--no-lookahead"})),
             Catch::Contains("--no-lookahead is for dpsgd's compressed differences") &&
                 Catch::Contains("--compress f32 has no look-ahead"));
  CHECK_THAT(problem(with_base({"--algo", "gossip", "--compress", "topk:1%", "--no-lookahead"})),
             Catch::Contains("--algo gossip --compress topk:1% has no look-ahead"));

  // powersgd:R is all-reduce's.
  const auto allreduce = [](std::vector<std::string> extra) {
    std::vector<std::string> a{"--algo", "allreduce", "--rank", "0", "--world", "4"};
    a.insert(a.end(), extra.begin(), extra.end());
    return with_base(a);
  };
  CHECK(problem(allreduce({"--compress", "powersgd:2"})).empty());
  CHECK(algorithm_options(parse_peer(allreduce({"--compress", "powersgd:2"}))).compressor == "powersgd:2");
  CHECK_THAT(problem(dpsgd({"--compress", "powersgd:2"})), Catch::Contains("PowerSGD"));
  CHECK_THAT(problem(allreduce({"--compress", "sign"})), Catch::Contains("powersgd:R"));
  CHECK_THAT(problem(allreduce({"--compress", "powersgd:2", "--consensus-step", "0.2"})),
             Catch::Contains("--consensus-step is for compressed differences"));
  CHECK_THROWS_WITH(parse_peer(allreduce({"--compress", "powersgd:64"})), Catch::Contains("1..32"));
  // PowerSGD takes --momentum from hearsay's optimizer and runs it over the agreed update.
  const auto power = parse_peer(allreduce({"--compress", "powersgd:2", "--momentum", "0.8", "--nesterov"}));
  CHECK(algorithm_applies_momentum(power));
  CHECK(optimizer_settings(power).momentum == 0.0f);
  CHECK_FALSE(optimizer_settings(power).nesterov);
  CHECK(power.train.momentum == Approx(0.8f));  // the flag itself stays as given
  for (const auto& keeps : {allreduce({"--compress", "f16"}), dpsgd({"--compress", "topk:1%"}),
                            allreduce({"--compress", "powersgd:2", "--optimizer", "adamw"})}) {
    const auto c = parse_peer(keeps);
    CHECK_FALSE(algorithm_applies_momentum(c));
    CHECK(optimizer_settings(c).momentum == c.train.momentum);
  }

  // powergossip:R is dpsgd's, with a consensus step.
  CHECK(problem(dpsgd({"--compress", "powergossip:2", "--consensus-step", "0.5"})).empty());
  CHECK_THAT(problem(dpsgd({"--compress", "powergossip:2", "--graph", "exp"})),
             Catch::Contains("--graph exp is directed") && Catch::Contains("use ring"));
  CHECK(algorithm_options(parse_peer(dpsgd({"--compress", "powergossip:2"}))).compressor == "powergossip:2");
  CHECK_THAT(problem(allreduce({"--compress", "powergossip:2"})),
             Catch::Contains("--algo allreduce sends values"));
  CHECK_THAT(problem(with_base({"--algo", "gossip", "--compress", "powergossip:1"})),
             Catch::Contains("which --algo dpsgd takes"));
  CHECK_THROWS_WITH(parse_peer(dpsgd({"--compress", "powergossip:0"})), Catch::Contains("powergossip:2"));
}

TEST_CASE("peer config: the id defaults to the listen address", "[peer-config]") {
  CHECK(peer_id(parse_peer({"--listen", "tcp://10.1.2.3:7000"})) == "10.1.2.3:7000");
  CHECK(peer_id(parse_peer({"--listen", "tcp://10.1.2.3:7000", "--id", "bob"})) == "bob");
  const std::string any = peer_id(parse_peer({"--listen", "tcp://0.0.0.0:7000"}));
  CHECK(any.size() > 5);
  CHECK(any.substr(any.size() - 5) == ":7000");
  CHECK(any.rfind("0.0.0.0", 0) != 0);  // the host name, which others can tell apart
}

TEST_CASE("peer config: docs/peer.example.toml parses and validates", "[peer-config]") {
  const std::string example = std::string(HEARSAY_SOURCE_DIR) + "/docs/peer.example.toml";
  const PeerConfig c = parse_peer({"--config", example});
  CHECK_NOTHROW(validate(c));
  CHECK_FALSE(c.network.listen.empty());
  CHECK(uses_graph(c.mixing.algo));
  CHECK_NOTHROW(topology::Topology::make(graph_spec(c)));
}

TEST_CASE("peer config: docs/CONFIG.md shows the example file as it is, and [gossip] says it is now [mixing]",
          "[peer-config]") {
  // CONFIG.md's copy of the example once had a line the file did not.
  CHECK_THAT(config_error("[gossip]\nfanout = 2\n"), Contains("[gossip] is now [mixing]"));
  std::ifstream doc(std::string(HEARSAY_SOURCE_DIR) + "/docs/CONFIG.md");
  const std::string text((std::istreambuf_iterator<char>(doc)), std::istreambuf_iterator<char>());
  const std::string opening = "`docs/peer.example.toml`:\n\n```toml\n";
  const auto start = text.find(opening);
  REQUIRE(start != std::string::npos);
  const auto end = text.find("```\n", start + opening.size());
  REQUIRE(end != std::string::npos);
  std::ifstream example(std::string(HEARSAY_SOURCE_DIR) + "/docs/peer.example.toml");
  const std::string file_text((std::istreambuf_iterator<char>(example)), std::istreambuf_iterator<char>());
  CHECK(text.substr(start + opening.size(), end - start - opening.size()) == file_text);
}

TEST_CASE("peer config: docs/CONFIG.md's --model row names every model of the zoo", "[peer-config]") {
  // It said `mlp, lenet` while resnet20 trained as well as they.
  std::ifstream in(std::string(HEARSAY_SOURCE_DIR) + "/docs/CONFIG.md");
  std::string line, row;
  while (std::getline(in, line))
    if (line.rfind("| `--model` |", 0) == 0) row = line;
  REQUIRE_FALSE(row.empty());
  for (const auto& model : hearsay::model_names()) {
    INFO(model);
    CHECK_THAT(row, Contains("`" + model + "`"));
  }
}
