// The configuration of `hearsay peer`, continued: emulation flags (--slowdown, --link,
// --link-others, --link-peer), --wait-for-world and the ready file.
#include "peer_config_test_util.hpp"

using namespace peer_config_test;

TEST_CASE("peer config: --slowdown takes a factor of at least 1", "[peer-config]") {
  CHECK(parse_peer(with_base({"--slowdown", "3"})).emulation.slowdown == 3);
  CHECK(problem(with_base({"--slowdown", "1"})).empty());
  CHECK_THAT(problem(with_base({"--slowdown", "0.5"})), Contains("--slowdown"));
  CHECK_THAT(problem(with_base({"--slowdown", "fast"})), Contains("--slowdown"));
  CHECK_THAT(config_error("[emulation]\nslowdown = 0\n"), Contains("slowdown"));
}

TEST_CASE("peer config: --link, --link-others and --link-peer set the emulated links", "[peer-config]") {
  const PeerConfig none = parse_peer(with_base({}));
  CHECK_FALSE(link_emulation(none).enabled());

  const PeerConfig c =
      parse_peer(with_base({"--link", "100mbit,5ms", "--link-others", "1gbit,1ms,loss=0.01", "--link-peer",
                            "rank1=1mbit,20ms", "--link-peer", "rank2=unlimited,0s", "--seed", "42"}));
  CHECK_NOTHROW(validate(c));
  const emulation::LinkEmulation e = link_emulation(c);
  CHECK(e.enabled());
  CHECK(e.seed == 42);
  CHECK(e.self == emulation::parse_link_spec("100mbit,5ms"));
  CHECK(e.others == emulation::parse_link_spec("1gbit,1ms,loss=0.01"));
  REQUIRE(e.peers.size() == 2);
  CHECK(e.peers.at("rank1") == emulation::parse_link_spec("1mbit,20ms"));
  CHECK(e.peers.at("rank2") == emulation::parse_link_spec("unlimited,0s"));
  // The slower rate and the longer delay of both ends.
  CHECK(e.link_to("rank1").bits_per_second == 1e6);
  CHECK(e.link_to("rank1").delay_seconds == Approx(0.020));
  CHECK(e.link_to("rank2").bits_per_second == 100e6);
  CHECK(e.link_to("rank7").loss == Approx(0.01));
  // Only one of them turns emulation on.
  CHECK(link_emulation(parse_peer(with_base({"--link-peer", "b=1mbit,1ms"}))).enabled());
}

TEST_CASE("peer config: bad link specs are refused naming the flag", "[peer-config]") {
  CHECK_THAT(problem(with_base({"--link", "fast"})), Contains("--link") && Contains("RATE,DELAY"));
  CHECK_THAT(problem(with_base({"--link", "1gbit"})), Contains("--link") && Contains("rate and a delay"));
  CHECK_THAT(problem(with_base({"--link-others", "1gbit,1ms,loss=1"})),
             Contains("--link-others") && Contains("loss"));
  CHECK_THAT(problem(with_base({"--link-peer", "rank1:1mbit,20ms"})),
             Contains("--link-peer") && Contains("no '='") && Contains("ID=SPEC"));
  CHECK_THAT(problem(with_base({"--link-peer", "=1mbit,20ms"})),
             Contains("--link-peer") && Contains("peer id"));
  CHECK_THAT(problem(with_base({"--link-peer", "rank1=1mbit"})),
             Contains("--link-peer") && Contains("rank1=1mbit"));
  CHECK_THAT(problem(with_base({"--link-peer", "b=1mbit,1ms", "--link-peer", "b=2mbit,1ms"})),
             Contains("--link-peer") && Contains("twice"));
  CHECK_THAT(config_error("[emulation]\nlink = \"1gbit,1xs\"\n"), Contains(".toml:2") && Contains("link"));
  CHECK_THAT(config_error("[emulation]\nlink-peer = [\"b\"]\n"), Contains("link-peer") && Contains("no '='"));
}

TEST_CASE("peer config: --wait-for-world needs a world", "[peer-config]") {
  CHECK(problem(with_base({"--rank", "1", "--world", "4", "--wait-for-world"})).empty());
  CHECK_FALSE(parse_peer(with_base({})).network.wait_for_world);
  CHECK_THAT(problem(with_base({"--wait-for-world"})),
             Contains("--wait-for-world needs --rank R and --world N"));
}

TEST_CASE("peer config: --ready-file names a file in a directory that exists", "[peer-config]") {
  TempPath dir;
  std::filesystem::create_directories(dir.path());
  CHECK(parse_peer(with_base({})).output.ready_file.empty());
  CHECK(problem(with_base({"--ready-file", dir.file("peer.ready")})).empty());
  CHECK_THAT(problem(with_base({"--ready-file", dir.str()})),
             Contains("--ready-file") && Contains("is a directory"));
  CHECK_THAT(problem(with_base({"--ready-file", dir.file("missing/peer.ready")})),
             Contains("--ready-file") && Contains("does not exist"));
}

TEST_CASE("peer config: the ready file says where the peer is, and a wait for it names the peer and its log",
          "[peer-config]") {
  TempPath dir;
  std::filesystem::create_directories(dir.path());
  PeerConfig cfg = parse_peer(with_base({"--rank", "2", "--world", "4", "--run", "r1"}));
  write_ready_file(cfg, "rank2", "tcp://127.0.0.1:4000", std::nullopt);  // no --ready-file: nothing
  CHECK(std::filesystem::is_empty(dir.path()));
  cfg.output.ready_file = dir.file("p.ready");
  CHECK_FALSE(read_ready_file(cfg.output.ready_file));
  write_ready_file(cfg, "rank2", "tcp://127.0.0.1:4000", 9100);
  const auto ready = read_ready_file(cfg.output.ready_file);
  REQUIRE(ready);
  CHECK(ready->id == "rank2");
  CHECK(ready->rank == 2);
  CHECK(ready->run == "r1");
  CHECK(ready->address == "tcp://127.0.0.1:4000");
  CHECK(ready->pid == ::getpid());
  CHECK(ready->http_port == 9100);
  const auto json = nlohmann::json::parse(hearsay::testing::read_file(cfg.output.ready_file));
  CHECK(json["rank"] == 2);
  // Without --rank and --http they are null; a rewrite replaces the file.
  cfg.network.rank = -1;
  write_ready_file(cfg, "p", "tcp://127.0.0.1:4001", std::nullopt);
  const auto again = nlohmann::json::parse(hearsay::testing::read_file(cfg.output.ready_file));
  CHECK(again["rank"].is_null());
  CHECK(again["http_port"].is_null());
  CHECK(again["address"] == "tcp://127.0.0.1:4001");

  ReadyWait wait;
  wait.who = "rank2";
  wait.log = dir.file("p.log");
  wait.timeout = std::chrono::milliseconds(100);
  CHECK(await_ready_file(cfg.output.ready_file, wait).address == "tcp://127.0.0.1:4001");
  CHECK_THROWS_WITH(await_ready_file(dir.file("none.ready"), wait),
                    Contains("rank2 did not listen within 0.1 s") && Contains(dir.file("p.log")));
  wait.ended = [] { return std::optional<std::string>("exit 2"); };
  CHECK_THROWS_WITH(await_ready_file(dir.file("none.ready"), wait),
                    Contains("rank2 exit 2 before it listened: see " + dir.file("p.log")));
  wait.reason = [] { return std::string("--frobnicate is not a flag"); };
  CHECK_THROWS_WITH(await_ready_file(dir.file("none.ready"), wait),
                    Contains("rank2 exit 2 before it listened: --frobnicate is not a flag"));
  std::ofstream(dir.file("bad.ready")) << "{\"id\": \"x\"}";
  CHECK_THROWS_WITH(read_ready_file(dir.file("bad.ready")), Contains("bad.ready") && Contains("address"));
}
