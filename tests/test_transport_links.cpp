// The transport's links: connecting again and again or to the same address keeps one link,
// a bye covers every link to its address, and a joiner's hello goes over a connection of
// its own, so that a seed can refuse it and say why.
#include <catch2/catch.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/log.hpp"
#include "gossip/network/transport/inproc_transport.hpp"
#include "gossip/network/transport/zmq_transport.hpp"
#include "transport_test_util.hpp"

using namespace hearsay;
using namespace hearsay::transport;
using namespace hearsay::transport::testing;
using namespace std::chrono_literals;
using wire::DropReason;
using wire::MessageType;

namespace {

// Every captured line is below a warning (the situation the test sets up is routine).
void check_no_warnings(const logging::CapturedLines& log) {
  for (const auto& line : log.lines()) {
    INFO(line.message);
    CHECK(line.level < logging::Level::warn);
  }
}

// b says bye to a, and a's control lane has it.
Message say_bye(Endpoints& ends) {
  wire::Header bye;
  bye.type = MessageType::bye;
  ends.b->send("a", bye);
  auto message = ends.a->receive_control(soon());
  REQUIRE(message);
  return std::move(*message);
}

}  // namespace

TEST_CASE("connecting to a peer again and again keeps the transport responsive", "[transport]") {
  // Each connect() to a new address replaces the link and closes the old dealer while
  // it is connecting or connected. libzmq reports that to the link's monitor with a
  // blocking send from its I/O thread, so a monitor whose reader went away first used
  // to freeze every socket of the peer. Here "b" moves between c's address and its own.
  const Kind kind = GENERATE(Kind::tcp, Kind::curve);
  // Every replaced link is a lost connection for both sides (and, with CURVE, a client
  // that left mid-handshake): warnings this test provokes on purpose.
  logging::CapturedLines quiet(logging::Level::off);
  Endpoints ends = make_endpoints(kind);
  ZmqOptions oc = zmq_options("c", kind);
  if (kind == Kind::curve) oc.security.authorized = authorize({ends.keys_a.public_z85});
  ZmqTransport c(oc);
  for (int i = 0; i < 100; ++i) {
    ends.a->connect("b", c.address());
    ends.a->connect("b", ends.b->address());
    // Answered before the next replacement: the ROUTER hands a routing id to the
    // connection that identifies last, so a link closed before its handshake finished
    // could otherwise take the id from the one that replaced it.
    CHECK(measured_round_trip(ends.a->ping("b", Clock::now() + 5s)));
  }
  CHECK(measured_round_trip(ends.b->ping("a", Clock::now() + 5s)));
}

TEST_CASE("connecting again to the same address keeps the link", "[transport]") {
  const Kind kind = GENERATE(Kind::tcp, Kind::curve);
  Endpoints ends = make_endpoints(kind);
  REQUIRE(measured_round_trip(ends.a->ping("b", soon())));
  logging::CapturedLines log(logging::Level::info);
  // As membership does for every repeated hello. A replaced link would be a client
  // leaving mid-handshake for b (a CURVE warning), and rapid replacements can leave a's
  // routing id at b on a closing connection.
  for (int i = 0; i < 200; ++i) ends.a->connect("b", ends.b->address());
  CHECK(measured_round_trip(ends.a->ping("b", soon())));
  CHECK(measured_round_trip(ends.b->ping("a", soon())));
  check_no_warnings(log);
}

TEST_CASE("a bye also covers a second link to the same address (a joiner's link to its seed)",
          "[transport]") {
  logging::CapturedLines log(logging::Level::info);
  Endpoints ends = make_endpoints(Kind::tcp);
  const std::string b_address = ends.b->address();
  const std::string seed = "seed:" + b_address;
  CHECK(measured_round_trip(ends.a->ping("b", soon())));
  ends.a->connect(seed, b_address);
  // Over the seed link: it is up once b has the message. (b's ROUTER now gives a's
  // routing id to this connection, so nothing more is sent over the first link.)
  wire::Header pull;
  pull.type = MessageType::params_pull;
  ends.a->send(seed, pull);
  auto pulled = ends.b->receive(soon());
  REQUIRE(pulled);
  CHECK(pulled->sender() == "a");
  (void)say_bye(ends);
  ends.b.reset();
  std::map<std::string, PeerFailure> failures;
  const auto deadline = Clock::now() + 15s;
  while (failures.size() < 2 && Clock::now() < deadline) {
    try {
      (void)ends.a->receive(deadline);
    } catch (const PeerError& e) {
      failures.emplace(e.peer_id(), e.failure());
    }
  }
  REQUIRE(failures.size() == 2);
  CHECK(failures.at("b") == PeerFailure::left);
  CHECK(failures.at(seed) == PeerFailure::left);
  check_no_warnings(log);
}

TEST_CASE("a peer that said bye and closed is a PeerError(left), logged as news, not a warning",
          "[transport]") {
  logging::CapturedLines log(logging::Level::info);
  Endpoints ends = make_endpoints(Kind::tcp);
  CHECK(measured_round_trip(ends.a->ping("b", soon())));  // both links are up
  const std::string b_address = ends.b->address();
  // The bye arrives (control lane), then b closes.
  const Message message = say_bye(ends);
  CHECK(message.type() == MessageType::bye);
  ends.b.reset();
  require_peer_error(*ends.a, "b", b_address, PeerFailure::left, Clock::now() + 15s);
  for (const auto& line : log.lines()) {
    INFO(line.message);
    CHECK_FALSE((line.level >= logging::Level::warn && line.message.find("'b'") != std::string::npos));
  }
  CHECK(log_has(log, "it left the run (said bye)"));
}

TEST_CASE("a joiner's hello reaches the seed over a connection of its own, and one the seed refuses is told why",
          "[transport]") {
  logging::CapturedLines log(logging::Level::info);
  ZmqTransport seed(zmq_options("s", Kind::tcp));
  ZmqTransport member(zmq_options("m", Kind::tcp));
  // The seed knows 'm' (membership connected to it), and the link is up.
  seed.connect("m", member.address());
  member.connect("s", seed.address());
  REQUIRE(measured_round_trip(seed.ping("m", soon())));
  REQUIRE(measured_round_trip(member.ping("s", soon())));

  const auto hello_from = [&](ZmqTransport& joiner) {
    const std::string key = "seed:" + seed.address();
    joiner.connect_seed(key, seed.address());
    wire::Header hello;
    hello.type = MessageType::hello;
    hello.address = joiner.address();
    joiner.send(key, hello);
  };
  const auto refusal_of = [&](ZmqTransport& joiner) -> std::optional<Message> {
    return joiner.receive_control(soon(), [](const Message& m) { return m.type() == MessageType::refused; });
  };
  SECTION("an id another connected process holds") {
    ZmqTransport twin(zmq_options("m", Kind::tcp));
    hello_from(twin);
    const auto refused = refusal_of(twin);
    REQUIRE(refused);
    CHECK(refused->sender() == "s");
    CHECK_THAT(refused->header().why, Catch::Contains("id 'm' is taken by " + member.address()));
    // The seed took nothing from it, and its link to the holder is untouched.
    CHECK_FALSE(seed.receive_control(Clock::now() + 300ms));
    CHECK(measured_round_trip(seed.ping("m", soon())));
  }
  SECTION("the seed's own id") {
    ZmqTransport twin(zmq_options("s", Kind::tcp));
    hello_from(twin);
    const auto refused = refusal_of(twin);
    REQUIRE(refused);
    CHECK_THAT(refused->header().why, Catch::Contains("id 's' is taken by " + seed.address()));
  }
  SECTION("another model: refused with the seed's run and fingerprint, which the joiner takes") {
    ZmqOptions o = zmq_options("other", Kind::tcp);
    o.expect.fingerprint = "lenet-other";
    ZmqTransport other(o);
    hello_from(other);
    const auto refused = refusal_of(other);
    REQUIRE(refused);
    CHECK(refused->header().fingerprint == expectation().fingerprint);
    CHECK(seed.counters().dropped[static_cast<std::size_t>(DropReason::wrong_fingerprint)] == 1);
  }
  SECTION("a new id is let through, under its own name") {
    ZmqTransport newcomer(zmq_options("n", Kind::tcp));
    hello_from(newcomer);
    const auto hello = seed.receive_control(soon());
    REQUIRE(hello);
    CHECK(hello->type() == MessageType::hello);
    CHECK(hello->sender() == "n");
    CHECK(hello->header().address == newcomer.address());
  }
}
