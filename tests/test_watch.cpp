// `hearsay watch`: the addresses it takes, the targets files it reads (scripts/launch's
// file_sd JSON), the HTTP client against a real StatusServer and against servers that
// answer garbage, too much or nothing, what it makes of /status replies (rates, states,
// what the others say of a silent peer) and the table it draws.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "loopback_listener.hpp"
#include "peer/http_client.hpp"
#include "peer/status_server.hpp"
#include "peer/watch_status.hpp"
#include "peer/watch_table.hpp"
#include "peer/watch_targets.hpp"
#include "test_support.hpp"

namespace hearsay {
namespace {

using testing::listen_on_loopback;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using watch::PeerTrack;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

// A TCP server on 127.0.0.1 that answers every connection with `reply` once the request
// head came, or, with hold, keeps it open saying nothing until the client closes it.
class FakeServer {
 public:
  explicit FakeServer(std::string reply, bool hold = false) : reply_(std::move(reply)), hold_(hold) {
    fd_ = listen_on_loopback(8, &port_);
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeServer() {
    ::shutdown(fd_, SHUT_RDWR);  // ends the accept
    thread_.join();
    ::close(fd_);
  }
  std::uint16_t port() const { return port_; }

 private:
  void serve() {
    for (;;) {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::string head;
      char buf[4096];
      while (head.find("\r\n\r\n") == std::string::npos) {
        const auto n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        head.append(buf, static_cast<std::size_t>(n));
      }
      if (hold_) {
        while (::recv(c, buf, sizeof buf, 0) > 0) {
        }
      } else {
        std::size_t sent = 0;
        while (sent < reply_.size()) {
          const auto n = ::send(c, reply_.data() + sent, reply_.size() - sent, MSG_NOSIGNAL);
          if (n <= 0) break;
          sent += static_cast<std::size_t>(n);
        }
      }
      ::close(c);
    }
  }

  std::string reply_;
  bool hold_;
  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::thread thread_;
};

// A port nothing listens on: one a socket bound and closed.
std::uint16_t closed_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

HttpUrl local(std::uint16_t port) { return parse_http_url("127.0.0.1:" + std::to_string(port)); }

std::string ok_reply(const std::string& body) {
  return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

// A /status body as a peer sends it.
std::string status_body(const std::string& peer, std::int64_t step, double time_s,
                        const nlohmann::json& members, const std::string& state = "training") {
  nlohmann::json j = {{"run", "r1"},
                      {"epochs", 5},
                      {"test_acc", 0.8125},
                      {"test_loss", 0.5},
                      {"state", state},
                      {"members", members},
                      {"metrics",
                       {{"peer", peer},
                        {"step", step},
                        {"epoch", 2},
                        {"time_s", time_s},
                        {"loss", 0.53125},
                        {"samples_per_s", 812.0},
                        {"partner_distance", 0.0123},
                        {"bytes_sent", 12700000},
                        {"bytes_received", 2048},
                        {"dropped", {{"wrong_run", 2}, {"bad_checksum", 1}}}}}};
  return j.dump();
}

nlohmann::json member(const std::string& id, const std::string& state, bool self = false, bool left = false) {
  return {{"id", id}, {"address", "tcp://127.0.0.1:1"}, {"state", state}, {"left", left}, {"self", self}};
}

HttpReply reply_with(const std::string& body) { return parse_http_reply(ok_reply(body), 1 << 20); }

}  // namespace

TEST_CASE("watch: a peer's address in each form it is given", "[watch]") {
  CHECK(parse_http_url("http://10.0.0.11:9101").text() == "http://10.0.0.11:9101/status");
  CHECK(parse_http_url("10.0.0.11:9101").text() == "http://10.0.0.11:9101/status");
  CHECK(parse_http_url(":9101").text() == "http://127.0.0.1:9101/status");
  CHECK(parse_http_url("HTTP://lab-a:9101/").text() == "http://lab-a:9101/status");
  CHECK(parse_http_url("http://lab-a:9101/metrics").path == "/status");  // the Prometheus URL, pasted
  CHECK(parse_http_url("http://lab-a:9101/proxy/status").path == "/proxy/status");
  CHECK(parse_http_url("http://lab-a").port == 80);
  const HttpUrl v6 = parse_http_url("[::1]:9101");
  CHECK(v6.host == "::1");
  CHECK(v6.text() == "http://[::1]:9101/status");
  CHECK(v6.host_port() == "[::1]:9101");
  const auto error = [](const std::string& text) { return error_of([&] { parse_http_url(text); }); };
  CHECK_THAT(error("https://lab-a:9101"), Contains("https is not served"));
  CHECK_THAT(error("ftp://lab-a:9101"), Contains("scheme 'ftp'"));
  CHECK_THAT(error("lab-a"), Contains("no port"));
  CHECK_THAT(error("lab-a:http"), Contains("'http' is not a number"));
  CHECK_THAT(error("lab-a:70000"), Contains("not 1 to 65535"));
  CHECK_THAT(error("lab-a:0"), Contains("not 1 to 65535"));
  CHECK_THAT(error("::1:9101"), Contains("brackets"));
  CHECK_THAT(error("[::1"), Contains("without ']'"));
  CHECK_THAT(error("http://:9101"), Contains("no host"));
  CHECK_THAT(error("http:///status"), Contains("no host"));
  CHECK_THAT(error(""), Contains("empty"));
  CHECK_THAT(error("lab a:1"), Contains("space"));
  CHECK_THAT(error("lab-a:"), Contains("is not a number"));
  CHECK_THAT(error("lab-a:9101"), Contains("(no error)"));
  CHECK_THAT(error("x:y"), Contains("expected http://HOST:PORT, HOST:PORT or :PORT"));
}

TEST_CASE("watch: replies read whole, chunked, cut short, too large or not HTTP", "[watch]") {
  HttpReply r = parse_http_reply(ok_reply("{\"a\":1}"), 1024);
  CHECK(r.ok());
  CHECK(r.body == "{\"a\":1}");
  CHECK(http_reply_complete(ok_reply("{\"a\":1}")));
  CHECK_FALSE(http_reply_complete(ok_reply("{\"a\":1}").substr(0, 70)));
  CHECK_FALSE(http_reply_complete("HTTP/1.1 200 OK\r\n\r\nbody until the end"));  // no length: the close says

  r = parse_http_reply(
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n3;x=y\r\nefg\r\n0\r\n\r\n", 1024);
  CHECK(r.ok());
  CHECK(r.body == "abcdefg");
  r = parse_http_reply("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 1024);
  CHECK(r.error == "bad reply: a broken chunked body");

  r = parse_http_reply(
      "HTTP/1.1 404 Not Found\r\nContent-Length: 40\r\n\r\nunknown path /x; try /metrics or /status\n", 1024);
  CHECK(r.answered);
  CHECK_FALSE(r.ok());
  CHECK(r.error == "bad reply: HTTP 404 Not Found (unknown path /x; try /metrics or /status)");

  CHECK(parse_http_reply("SSH-2.0-OpenSSH_9.2\r\n", 1024).error == "bad reply: not HTTP");
  CHECK(parse_http_reply("", 1024).error == "bad reply: the connection closed without an answer");
  CHECK(parse_http_reply("HTTP/1.1 200 OK\r\nContent-", 1024).error ==
        "bad reply: the connection closed inside the reply's head");
  CHECK(parse_http_reply("HTTP/1.1 abc\r\n\r\n", 1024).error.rfind("bad reply: no status code", 0) == 0);
  CHECK(parse_http_reply("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", 1024).error ==
        "bad reply: the body ended after 3 of 10 bytes");
  CHECK(parse_http_reply("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", 1024).error ==
        "bad reply: Content-Length '-1' is not a number");
  CHECK(parse_http_reply(ok_reply(std::string(2048, 'x')), 1024).error == "bad reply: a body over 1 KiB");
}

TEST_CASE("watch: targets files as scripts/launch writes them, and what is wrong with bad ones", "[watch]") {
  const std::string launch_file = R"([
 {"targets": ["10.0.0.11:9101"], "labels": {"run": "myrun", "rank": "0", "host": "lab-a", "algorithm": "gossip"}},
 {"targets": ["10.0.0.12:9101", "[::1]:9102"], "labels": {"run": "myrun", "rank": "1"}},
 {"targets": ["10.0.0.13:9101"]},
 {"targets": []}
])";
  const std::vector<WatchTarget> t = parse_targets_file(launch_file, "t.json");
  REQUIRE(t.size() == 4);
  CHECK(t[0].url.text() == "http://10.0.0.11:9101/status");
  CHECK(t[0].labels.at("host") == "lab-a");
  CHECK(t[0].labels.at("algorithm") == "gossip");
  CHECK(t[2].url.host == "::1");
  CHECK(t[2].labels.at("rank") == "1");
  CHECK(t[3].labels.empty());
  CHECK(parse_targets_file("[]", "t.json").empty());

  const auto error = [](const std::string& text, const std::string& name = "t.json") {
    return error_of([&] { parse_targets_file(text, name); });
  };
  CHECK_THAT(error("[{\"targets\": [\"a:1\"],"), Contains("t.json: not JSON; expected a Prometheus file_sd"));
  CHECK_THAT(error("- targets: [a:1]", "t.yml"), Contains("YAML targets files are not read"));
  CHECK_THAT(error("{\"targets\": [\"a:1\"]}"), Contains("t.json: a JSON object; expected"));
  CHECK_THAT(error("[{\"labels\": {}}]"), Contains("t.json: entry 1 has no \"targets\""));
  CHECK_THAT(error("[{\"targets\": [\"a:1\"]}, 3]"), Contains("t.json: entry 2 is a number, not an object"));
  CHECK_THAT(error("[{\"targets\": \"a:1\"}]"), Contains("entry 1: \"targets\" is a string, not a list"));
  CHECK_THAT(error("[{\"targets\": [9101]}]"), Contains("entry 1, target 1 is a number, not \"HOST:PORT\""));
  CHECK_THAT(error("[{\"targets\": [\"a:1\", \"lab-a\"]}]"),
             Contains("entry 1, target 2: 'lab-a' is not a peer's"));
  CHECK_THAT(error("[{\"targets\": [\"a:1\"], \"labels\": {\"rank\": 0}}]"),
             Contains("label \"rank\" is a number, not a string"));
  CHECK_THAT(error("[{\"targets\": [\"a:1\"], \"labels\": [1]}]"),
             Contains("\"labels\" is a array, not an object"));
}

TEST_CASE("watch: targets from the command line and files, a file read again when it changes", "[watch]") {
  testing::TempPath dir;
  std::filesystem::create_directories(dir.path());
  const std::string file = dir.file("targets.json");
  const auto write = [&](const std::string& text) { std::ofstream(file, std::ios::trunc) << text; };
  write(R"([{"targets": ["127.0.0.1:9101"], "labels": {"rank": "0"}}])");
  TargetList list({file, "127.0.0.1:9101", ":9105"});  // the file's first: its labels win
  REQUIRE(list.targets().size() == 2);
  CHECK(list.targets()[0].labels.at("rank") == "0");
  CHECK(list.targets()[1].url.port == 9105);
  CHECK(list.has_files());
  CHECK(list.refresh().empty());

  write(R"([{"targets": ["127.0.0.1:9101"], "labels": {"rank": "0"}},
            {"targets": ["127.0.0.1:9102"], "labels": {"rank": "1"}}])");  // a peer added
  CHECK(list.refresh().empty());
  REQUIRE(list.targets().size() == 3);
  CHECK(list.targets()[1].url.port == 9102);

  write("[{\"targets\": [");  // broken: the last good list stays, with a warning
  const std::vector<std::string> warnings = list.refresh();
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Contains("not JSON") && Contains("still watching its last 2 target(s)"));
  CHECK(list.targets().size() == 3);
  std::filesystem::remove(file);
  CHECK_THAT(list.refresh().at(0), Contains("cannot read it"));

  const auto error = [](const std::vector<std::string>& args) { return error_of([&] { TargetList{args}; }); };
  CHECK_THAT(error({dir.file("none.json")}), Contains("no such file, and not a peer's address either"));
  CHECK_THAT(error({dir.str()}), Contains("not a regular file"));
  CHECK_THAT(error({"lab-a:port"}), Contains("'port' is not a number"));
  write("{}");
  CHECK_THAT(error({file}), Contains("targets.json: a JSON object"));
}

TEST_CASE("watch: the client reads a real StatusServer, and a silent peer never holds up the others",
          "[watch]") {
  StatusServer server("127.0.0.1:0", [] {
    StatusServer::Snapshot s;
    s.metrics.peer_id = "rank2";
    s.metrics.step = 640;
    s.metrics.epoch = 2;
    s.metrics.loss = 0.5;
    s.metrics.bytes_sent = 5000;
    s.metrics.dropped[0] = 3;
    s.status = {
        {"run", "r1"},
        {"state", "training"},
        {"epochs", 4},
        {"members", nlohmann::json::array({member("rank2", "alive", true), member("rank3", "dead")})}};
    return s;
  });
  FakeServer silent("", /*hold=*/true);
  FakeServer garbage("SSH-2.0-OpenSSH_9.2\r\n");
  FakeServer not_json(ok_reply("<html>hello</html>"));
  FakeServer huge("HTTP/1.1 200 OK\r\n\r\n" + std::string(200 * 1024, 'x'));
  const std::uint16_t nobody = closed_port();
  HttpClient client;
  const auto started = std::chrono::steady_clock::now();
  const std::vector<HttpReply> replies =
      client.get_all({local(server.port()), local(silent.port()), local(garbage.port()),
                      local(not_json.port()), local(huge.port()), local(nobody)},
                     400ms, 64 * 1024);
  const auto took = std::chrono::steady_clock::now() - started;
  CHECK(took < 2s);  // the deadline, not the silent peer, ends the poll
  REQUIRE(replies.size() == 6);
  CHECK(replies[0].ok());
  CHECK_THAT(replies[1].error, Contains("timed out after 400ms waiting for the reply"));
  CHECK(replies[2].error == "bad reply: not HTTP");
  CHECK(replies[3].ok());  // HTTP is fine; the JSON is not: the track says so
  CHECK(replies[4].error == "bad reply: over 80 KiB");
  CHECK(replies[5].error == "connection refused");

  std::string error;
  const auto status = watch::parse_status(replies[0].body, error);
  REQUIRE(status);
  CHECK(status->peer == "rank2");
  CHECK(status->run == "r1");
  CHECK(status->state == "training");
  CHECK(status->step == 640);
  CHECK(status->epochs == 4);
  CHECK(status->bytes_sent == 5000);
  CHECK(status->dropped == 3);
  REQUIRE(status->members.size() == 2);
  CHECK(status->members[1].state == "dead");
  CHECK_FALSE(watch::parse_status(replies[3].body, error));
  CHECK(error == "bad reply: not JSON");
  CHECK_FALSE(watch::parse_status("{\"run\": 1}", error));
  CHECK_THAT(error, Contains("no \"metrics\""));
  CHECK_FALSE(watch::parse_status("[1, 2]", error));
  CHECK(error == "bad reply: JSON, but no object");

  // The client is used again poll after poll: the second round sees the same.
  const std::vector<HttpReply> again =
      client.get_all({local(server.port()), local(nobody)}, 400ms, 64 * 1024);
  CHECK(again[0].ok());
  CHECK(again[1].error == "connection refused");
  CHECK(server.requests_served() == 2);
}

TEST_CASE("watch: step rates between polls, states, and what the others say of a silent peer", "[watch]") {
  const auto t0 = watch::Clock::now();
  const nlohmann::json members =
      nlohmann::json::array({member("rank0", "alive", true), member("rank1", "alive"),
                             member("rank2", "suspect"), member("rank3", "dead")});
  PeerTrack a, b, silent, never, bad;
  a.update(reply_with(status_body("rank0", 100, 10.0, members)), t0);
  CHECK_FALSE(a.step_rate());
  a.update(reply_with(status_body("rank0", 150, 12.0, members)), t0 + 2s);
  REQUIRE(a.step_rate());
  CHECK(*a.step_rate() == Approx(25.0));
  CHECK(watch::derive_state(a, nullptr) == "training");
  a.update(reply_with(status_body("rank0", 3, 0.5, members)), t0 + 3s);  // restarted: no rate across it
  CHECK_FALSE(a.step_rate());

  b.update(reply_with(status_body("rank1", 100, 10.0, members)), t0);
  silent.update(reply_with(status_body("rank3", 90, 9.0, members, "training")), t0);
  HttpReply refused;
  refused.error = "connection refused";
  silent.update(refused, t0 + 4s);
  never.update(refused, t0 + 4s);
  bad.update(reply_with("{\"not\": \"a status\"}"), t0);
  CHECK(silent.silent_s(t0 + 4s) == Approx(4.0));
  CHECK(silent.last()->step == 90);  // kept: where it was when it went silent

  const auto said = watch::verdicts({&a, &b, &silent, &never, &bad});
  CHECK(said.at("rank3").dead == 2);  // a's and b's lists; the silent one's own is not counted
  CHECK(said.at("rank2").suspect == 2);
  CHECK(said.at("rank1").alive == 1);  // a's list (b's entry of itself is its own)
  CHECK(watch::verdict_text(said.at("rank3"), true) == "dead per 2 peers");
  CHECK(watch::verdict_text({1, 0, 1, 0}, true) == "dead per 1, alive per 1 peer");
  CHECK(watch::verdict_text({0, 1, 2, 0}, false) == "dead per 2, suspect per 1 peer");
  CHECK(watch::verdict_text({0, 0, 0, 3}, false) == "said bye per 3 peers");
  CHECK(watch::verdict_text({3, 0, 0, 0}, false).empty());

  CHECK(watch::derive_state(silent, &said.at("rank3")) == "no answer");
  CHECK(watch::derive_state(never, nullptr) == "no answer");
  CHECK(watch::derive_state(bad, nullptr) == "bad reply");
  CHECK(bad.error() == "bad reply: no \"metrics\" in it (is this a hearsay peer's /status?)");
  const watch::Verdict bye{0, 0, 0, 3};
  CHECK(watch::derive_state(silent, &bye) == "ended");
  PeerTrack ending;
  ending.update(reply_with(status_body("rank1", 100, 10.0, members, "ending")), t0);
  CHECK(watch::derive_state(ending, nullptr) == "ending");
  ending.update(refused, t0 + 1s);
  CHECK(watch::derive_state(ending, nullptr) == "ended");
  PeerTrack old;  // a peer from before "state": its step says
  old.update(reply_with(status_body("rank1", 0, 1.0, members, "")), t0);
  CHECK(watch::derive_state(old, nullptr) == "starting");

  const watch::Partners p = watch::partners_of(*a.last());
  CHECK(p.alive == 1);
  CHECK(p.known == 3);
}

TEST_CASE("watch: units, cut lines and the rows of a run with a killed peer", "[watch]") {
  CHECK(watch::format_bytes(0) == "0B");
  CHECK(watch::format_bytes(1023) == "1023B");
  CHECK(watch::format_bytes(1024) == "1.00K");
  CHECK(watch::format_bytes(12390) == "12.1K");
  CHECK(watch::format_bytes(1003520) == "980K");
  CHECK(watch::format_bytes(12700000) == "12.1M");
  CHECK(watch::format_bytes(5000000000ULL) == "4.66G");
  CHECK(watch::format_optional(std::nullopt, "%.1f") == "-");
  CHECK(watch::format_optional(2.25, "%.1f") == "2.2");
  CHECK(watch::fit("abcdefghij", 0) == "abcdefghij");
  CHECK(watch::fit("abcdefghij", 10) == "abcdefghij");
  CHECK(watch::fit("abcdefghij", 8) == "abcde...");
  CHECK(watch::fit("abcdefghij", 2) == "ab");

  const auto t0 = watch::Clock::now();
  const nlohmann::json members = nlohmann::json::array({member("rank0", "alive"), member("rank1", "alive"),
                                                        member("rank2", "dead"), member("rank4", "alive")});
  std::vector<WatchTarget> targets = parse_targets_file(R"([
    {"targets": ["10.0.0.12:9101"], "labels": {"rank": "1", "host": "lab-b", "run": "myrun"}},
    {"targets": ["10.0.0.11:9101"], "labels": {"rank": "0", "host": "lab-a", "run": "myrun"}},
    {"targets": ["10.0.0.13:9101"], "labels": {"rank": "2", "host": "lab-c", "run": "myrun"}}])",
                                                        "t.json");
  PeerTrack t1, t0_, t2;
  t1.update(reply_with(status_body("rank1", 1000, 10.0, members)), t0);
  t1.update(reply_with(status_body("rank1", 1050, 12.0, members)), t0 + 2s);
  t0_.update(reply_with(status_body("rank0", 990, 12.0, members)), t0 + 2s);
  HttpReply timed_out;
  timed_out.error = "timed out after 800ms connecting";
  t2.update(timed_out, t0 + 2s);
  const std::vector<const PeerTrack*> tracks = {&t1, &t0_, &t2};
  watch::FrameInput in;
  in.targets = &targets;
  in.tracks = &tracks;
  in.wall_time = std::chrono::system_clock::now();
  in.now = t0 + 3500ms;
  in.interval = 500ms;
  in.warnings = {"t.json: cannot read it"};
  const std::vector<watch::Line> lines = watch::frame(in);
  std::string all;
  for (const auto& l : lines) all += l.text + "\n";
  INFO(all);
  REQUIRE(lines.size() >= 6);
  CHECK_THAT(lines[0].text, Contains("run myrun") && Contains("2/3 answering") && Contains("every 500ms"));
  CHECK(lines[0].tone == watch::Tone::title);
  CHECK(lines[2].text.rfind("RANK  HOST", 0) == 0);
  // Sorted by rank; numbers right-aligned under their titles.
  CHECK(lines[3].text.rfind("   0  lab-a:9101  training", 0) == 0);
  CHECK(lines[4].text.rfind("   1  lab-b:9101  training", 0) == 0);
  const auto step_end = lines[2].text.find("STEP ") + 4;
  CHECK(lines[4].text.substr(step_end - 4, 4) == "1050");
  CHECK(lines[4].text.find("12.1M") != std::string::npos);   // OUT
  CHECK(lines[4].text.find("2.00K") != std::string::npos);   // IN
  CHECK(lines[4].text.find(" 25.0 ") != std::string::npos);  // steps/s over the two polls
  CHECK(lines[4].text.find("81.2%") != std::string::npos);   // test accuracy
  CHECK(lines[4].text.find(" 2/3 ") != std::string::npos);   // partners: 2 alive of 3 known
  CHECK(lines[4].text.find("2/5") != std::string::npos);     // epoch of epochs
  CHECK(lines[5].text.rfind(
            "   2  lab-c:9101  no answer  for 1.5s: timed out after 800ms connecting; dead per 2 "
            "peers",
            0) == 0);
  CHECK(lines[5].tone == watch::Tone::bad);
  CHECK_THAT(all, Contains("members not watched here: rank4 (alive per 2 peers)"));
  CHECK(lines.back().text == "warning: t.json: cannot read it");
  CHECK(lines.back().tone == watch::Tone::warn);
}

TEST_CASE("watch: the command's exit status, its one-line errors and a table off a terminal",
          "[watch][process]") {
  StatusServer server("127.0.0.1:0", [] {
    StatusServer::Snapshot s;
    s.metrics.peer_id = "rank0";
    s.metrics.step = 12;
    s.status = {{"run", "cli"}, {"state", "training"}, {"members", nlohmann::json::array()}};
    return s;
  });
  const std::string live = ":" + std::to_string(server.port());
  const std::string dead = ":" + std::to_string(closed_port());
  testing::CliResult r = testing::run_hearsay({"watch", live});  // stdout is a file: one table
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Contains("run cli   1/1 answering") && Contains("training"));
  CHECK(r.out.find('\x1b') == std::string::npos);  // no escapes off a terminal
  r = testing::run_hearsay({"watch", "--count", "2", "--interval", "100ms", live, dead});
  CHECK(r.status == 1);  // one did not answer
  CHECK_THAT(r.out, Contains("1/2 answering") && Contains("connection refused"));
  CHECK(r.out.find("RANK  HOST") != r.out.rfind("RANK  HOST"));  // two tables
  r = testing::run_hearsay({"watch", "no-such-targets.json"});
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Contains("hearsay watch: 'no-such-targets.json': no such file"));
  r = testing::run_hearsay({"watch", "--interval", "10ms", live});
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Contains("--interval 10ms is too short"));
  r = testing::run_hearsay({"watch"});
  CHECK(r.status == 2);
}

}  // namespace hearsay
