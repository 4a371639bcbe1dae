// The --http server and the metrics formats: real HTTP over loopback with a plain
// socket client, the Prometheus text and JSON a scraper would read, and the errors a
// bad request, a bad flag or a port in use give.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "peer/metrics.hpp"
#include "peer/status_server.hpp"

namespace hearsay {
namespace {

// Sends `request` to 127.0.0.1:port and returns everything the server sends back
// until it closes the connection (the server always closes: Connection: close).
std::string http_exchange(std::uint16_t port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  timeval timeout{10, 0};  // a server that never answers fails the test, not hangs it
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  std::size_t sent = 0;
  while (sent < request.size()) {
    const auto n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server may close early on an oversized head
    sent += static_cast<std::size_t>(n);
  }
  std::string reply;
  char buf[4096];
  for (;;) {
    const auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    reply.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return reply;
}

std::string body_of(const std::string& reply) {
  const auto at = reply.find("\r\n\r\n");
  return at == std::string::npos ? std::string() : reply.substr(at + 4);
}

PeerMetrics sample_metrics() {
  PeerMetrics m;
  m.peer_id = "peer-\"3\"";  // a quote the label escaping must handle
  m.algo = "gossip";
  m.time_s = 12.5;
  m.step = 420;
  m.epoch = 2;
  m.loss = 0.375;
  m.train_acc = 0.875;
  m.samples_per_s = 3100;
  m.bytes_sent = 123456789;
  m.bytes_received = 987654321;
  m.exchanges_ok = 40;
  m.exchanges_timed_out = 3;
  m.exchanges_refused = 3;
  m.exchanges_busy = 7;
  m.exchanges_implausible = 2;
  m.dropped[static_cast<std::size_t>(hearsay::wire::DropReason::bad_checksum)] = 5;
  m.partner_distance = 0.25;
  m.live_members = 4;
  m.checkpoints_written = 6;
  m.checkpoint_failures = 3;
  return m;
}

}  // namespace

TEST_CASE("prometheus text names every series once, with type, help and escaped labels", "[status-server]") {
  const std::string text = to_prometheus(sample_metrics());
  CHECK(text.find("hearsay_step{peer=\"peer-\\\"3\\\"\",algo=\"gossip\"} 420\n") != std::string::npos);
  CHECK(text.find("# TYPE hearsay_sent_bytes_total counter\n") != std::string::npos);
  CHECK(text.find("hearsay_sent_bytes_total{peer=\"peer-\\\"3\\\"\",algo=\"gossip\"} 123456789\n") !=
        std::string::npos);
  CHECK(text.find("hearsay_train_loss{peer=\"peer-\\\"3\\\"\",algo=\"gossip\"} 0.375\n") !=
        std::string::npos);
  CHECK(text.find("hearsay_live_members{peer=\"peer-\\\"3\\\"\",algo=\"gossip\"} 4\n") != std::string::npos);
  // Every sample line has exactly one HELP and one TYPE line before it.
  std::size_t helps = 0, types = 0, samples = 0, pos = 0;
  while (pos < text.size()) {
    const auto end = text.find('\n', pos);
    const std::string line = text.substr(pos, end - pos);
    if (line.rfind("# HELP ", 0) == 0)
      ++helps;
    else if (line.rfind("# TYPE ", 0) == 0)
      ++types;
    else if (!line.empty())
      ++samples;
    pos = end + 1;
  }
  CHECK(text.find("hearsay_exchanges_implausible_total{peer=\"peer-\\\"3\\\"\",algo=\"gossip\"} 2\n") !=
        std::string::npos);
  // Every family once; the drops are one family with a sample per reason.
  CHECK(helps == 18);
  CHECK(types == helps);
  CHECK(samples == 17 + hearsay::wire::kDropReasonCount);
  // A checkpoint that could not be written (a full disk) is counted where it is scraped.
  CHECK(text.find("hearsay_checkpoint_failures_total{peer=\"peer-\\\"3\\\"\",algo=\"gossip\"} 3\n") !=
        std::string::npos);
  // Busy partners apart from refusals: a healthy gossip run has many of the first.
  CHECK(text.find("hearsay_exchanges_busy_total{peer=\"peer-\\\"3\\\"\",algo=\"gossip\"} 7\n") !=
        std::string::npos);
  CHECK(text.find("hearsay_dropped_messages_total{peer=\"peer-\\\"3\\\"\",algo=\"gossip\",reason=\"bad_"
                  "checksum\"} 5\n") != std::string::npos);
  PeerMetrics odd = sample_metrics();
  odd.loss = std::numeric_limits<double>::quiet_NaN();
  CHECK(to_prometheus(odd).find("hearsay_train_loss{peer=\"peer-\\\"3\\\"\",algo=\"gossip\"} NaN\n") !=
        std::string::npos);
}

TEST_CASE("the JSON metrics line carries every field", "[status-server]") {
  const auto j = to_json(sample_metrics());
  CHECK(j.at("type") == "metrics");
  CHECK(j.at("step") == 420);
  CHECK(j.at("bytes_received") == 987654321u);
  CHECK(j.at("exchanges_timed_out") == 3u);
  CHECK(j.at("live_members") == 4);
  CHECK(j.at("train_acc").get<double>() == 0.875);
  CHECK(j.at("exchanges_implausible") == 2u);
  CHECK(j.at("exchanges_busy") == 7u);
  CHECK(j.at("dropped").at("bad_checksum") == 5u);
  CHECK(j.at("dropped").size() == hearsay::wire::kDropReasonCount);  // every reason, zeros too
}

TEST_CASE("the status server answers /metrics and /status from the current snapshot", "[status-server]") {
  std::atomic<std::int64_t> step{1};
  StatusServer server("127.0.0.1:0", [&] {
    StatusServer::Snapshot s;
    s.metrics = sample_metrics();
    s.metrics.step = step.load();
    s.status = {{"members", {"a", "b"}}};
    return s;
  });
  REQUIRE(server.port() != 0);

  std::string reply = http_exchange(server.port(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(reply.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(reply.find("Content-Type: text/plain; version=0.0.4") != std::string::npos);
  CHECK(body_of(reply).find("hearsay_step{peer=\"peer-\\\"3\\\"\",algo=\"gossip\"} 1\n") !=
        std::string::npos);

  step = 77;  // the next request sees the new snapshot
  reply = http_exchange(server.port(), "GET /status HTTP/1.0\r\n\r\n");
  CHECK(reply.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  const auto status = nlohmann::json::parse(body_of(reply));
  CHECK(status.at("metrics").at("step") == 77);
  CHECK(status.at("members") == nlohmann::json({"a", "b"}));
  CHECK(server.requests_served() == 2);
}

TEST_CASE("the status server refuses what it does not serve and keeps serving", "[status-server]") {
  StatusServer server("127.0.0.1:0", [] { return StatusServer::Snapshot{sample_metrics(), {}}; });
  CHECK(http_exchange(server.port(), "GET /nope HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0) == 0);
  CHECK(http_exchange(server.port(), "POST /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405", 0) == 0);
  CHECK(http_exchange(server.port(), "hello there\r\n\r\n").rfind("HTTP/1.1 400", 0) == 0);
  CHECK(http_exchange(server.port(), "GET /" + std::string(20000, 'a')).rfind("HTTP/1.1 400", 0) == 0);
  CHECK(http_exchange(server.port(), "GET /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200", 0) == 0);
  CHECK(server.requests_served() == 1);
}

TEST_CASE("a snapshot that throws is a 500, not a dead server", "[status-server]") {
  std::atomic<bool> fail{true};
  StatusServer server("127.0.0.1:0", [&] {
    if (fail) throw std::runtime_error("not started yet");
    return StatusServer::Snapshot{sample_metrics(), {}};
  });
  const std::string reply = http_exchange(server.port(), "GET /status HTTP/1.1\r\n\r\n");
  CHECK(reply.rfind("HTTP/1.1 500", 0) == 0);
  CHECK(body_of(reply).find("not started yet") != std::string::npos);
  fail = false;
  CHECK(http_exchange(server.port(), "GET /status HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200", 0) == 0);
}

TEST_CASE("http listen values parse or say what form they need, and a port in use is named",
          "[status-server]") {
  CHECK(parse_http_listen(":9100").host == "0.0.0.0");
  CHECK(parse_http_listen(":9100").port == 9100);
  CHECK(parse_http_listen("9100").port == 9100);
  CHECK(parse_http_listen("127.0.0.1:0").host == "127.0.0.1");
  CHECK(parse_http_listen("[::1]:8080").host == "::1");
  CHECK_THROWS_WITH(parse_http_listen("host:"), Catch::Contains("expected :PORT"));
  CHECK_THROWS_WITH(parse_http_listen(":99999"), Catch::Contains("above 65535"));
  CHECK_THROWS_WITH(parse_http_listen(":http"), Catch::Contains("not a number"));

  StatusServer first("127.0.0.1:0", [] { return StatusServer::Snapshot{}; });
  const std::string taken = "127.0.0.1:" + std::to_string(first.port());
  CHECK_THROWS_WITH(StatusServer(taken, [] { return StatusServer::Snapshot{}; }),
                    Catch::Contains(taken) && Catch::Contains("choose another port"));
}

}  // namespace hearsay
