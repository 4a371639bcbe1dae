// The transport layer: round trips in every dtype over the in-process fabric, ZeroMQ
// tcp:// and ipc://, and CURVE; dead and unreachable peers; a flood of hostile messages
// at a live ZeroMQ endpoint; CURVE authorization. Waits use generous deadlines only.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <future>
#include <limits>
#include <map>
#include <thread>
#include <zmq.hpp>

#include "base/log.hpp"
#include "base/rng.hpp"
#include "gossip/network/transport/inproc_transport.hpp"
#include "gossip/network/transport/zmq_transport.hpp"
#include "transport_test_util.hpp"

using namespace hearsay;
using namespace hearsay::transport;
using namespace hearsay::transport::testing;
using namespace std::chrono_literals;
using wire::DropReason;
using wire::Dtype;
using wire::MessageType;

TEST_CASE("round trips in every dtype keep values within the dtype's rounding", "[transport][slow]") {
  const Kind kind = GENERATE(Kind::inproc, Kind::tcp, Kind::ipc, Kind::curve);
  INFO("transport " << to_string(kind));
  Endpoints ends = make_endpoints(kind);
  Rng rng(7);
  std::uint64_t step = 0;
  for (std::size_t n :
       {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{4096}, std::size_t{10'000'000}}) {
    const auto values = std::make_shared<std::vector<float>>(random_values(rng, n));
    for (Dtype dtype : {Dtype::f32, Dtype::f16, Dtype::bf16, Dtype::int8}) {
      INFO("n = " << n << ", dtype " << wire::to_string(dtype));
      wire::Header header;
      header.type = MessageType::params_push;
      header.step = ++step;
      header.offset = 3;
      Payload payload =
          dtype == Dtype::f32 ? Payload::borrow_f32(*values, values) : Payload::encode(dtype, *values);
      ends.a->send("b", header, std::move(payload));
      auto message = ends.b->receive(soon());
      REQUIRE(message);
      CHECK(message->sender() == "a");
      CHECK(message->type() == MessageType::params_push);
      CHECK(message->header().step == step);
      CHECK(message->header().offset == 3);
      CHECK(message->header().dtype == dtype);
      REQUIRE(message->count() == n);
      std::vector<float> decoded(n, std::numeric_limits<float>::quiet_NaN());
      message->decode_into(decoded);
      require_within_rounding(dtype, *values, decoded);
    }
  }
  CHECK(ends.b->counters().total_dropped() == 0);
}

TEST_CASE("a borrowed f32 buffer is held until sent and then released", "[transport]") {
  const Kind kind = GENERATE(Kind::inproc, Kind::tcp);
  Endpoints ends = make_endpoints(kind);
  std::vector<float> values(1000, 0.5f);
  std::promise<void> released;
  auto released_future = released.get_future();
  {
    std::shared_ptr<const void> keep_alive(values.data(), [&](const void*) { released.set_value(); });
    wire::Header header;
    header.type = MessageType::params_push;
    ends.a->send("b", header, Payload::borrow_f32(values, std::move(keep_alive)));
  }
  auto message = ends.b->receive(soon());
  REQUIRE(message);
  REQUIRE(released_future.wait_until(soon()) == std::future_status::ready);
  REQUIRE(message->decode() == values);
}

TEST_CASE("replies reach a peer that only connected to us and pings are answered", "[transport]") {
  const Kind kind = GENERATE(Kind::inproc, Kind::tcp, Kind::curve);
  Endpoints ends = make_endpoints(kind, /*connect_back=*/false);
  std::thread responder([&] {
    auto pull = ends.b->receive(soon());
    if (!pull) return;
    wire::Header reply;
    reply.type = MessageType::params_reply;
    reply.nonce = pull->header().nonce;
    ends.b->send(pull->sender(), reply, Payload::copy_f32(std::vector<float>{1, 2, 3}));
  });
  wire::Header pull;
  pull.type = MessageType::params_pull;
  Message reply = ends.a->request("b", pull, {}, soon());
  responder.join();
  CHECK(reply.sender() == "b");
  CHECK(reply.decode() == std::vector<float>{1, 2, 3});
  CHECK(measured_round_trip(ends.a->ping("b", soon())));
  // A ping is answered by the transport and never shows up in the caller's inbox.
  CHECK_FALSE(ends.b->receive(Clock::now()));
}

TEST_CASE("a peer that was never connected is a PeerError naming it", "[transport]") {
  const Kind kind = GENERATE(Kind::inproc, Kind::tcp);
  Endpoints ends = make_endpoints(kind, /*connect_back=*/false);
  wire::Header ping;
  try {
    ends.b->send("nobody", ping);
    FAIL("send to an unknown peer did not throw");
  } catch (const PeerError& e) {
    CHECK(e.failure() == PeerFailure::unknown_peer);
    CHECK(e.peer_id() == "nobody");
    CHECK_THAT(e.what(), Catch::Contains("'nobody'"));
  }
}

TEST_CASE("a request nobody answers is a PeerError(no_reply) at its deadline", "[transport]") {
  const Kind kind = GENERATE(Kind::inproc, Kind::tcp);
  Endpoints ends = make_endpoints(kind);
  wire::Header pull;
  pull.type = MessageType::params_pull;
  const auto deadline = Clock::now() + 200ms;
  try {
    ends.a->request("b", pull, {}, deadline);
    FAIL("request without an answer did not throw");
  } catch (const PeerError& e) {
    CHECK(e.failure() == PeerFailure::no_reply);
    CHECK(e.peer_id() == "b");
    CHECK(e.address() == ends.b->address());
    CHECK(Clock::now() >= deadline);
  }
  // The unanswered request itself is still there for b's caller.
  auto pending = ends.b->receive(soon());
  REQUIRE(pending);
  CHECK(pending->type() == MessageType::params_pull);
}

TEST_CASE("misuse of send is refused before anything goes out", "[transport]") {
  Endpoints ends = make_endpoints(Kind::inproc);
  wire::Header push;
  push.type = MessageType::params_push;
  CHECK_THROWS_AS(ends.a->send("b", push), std::invalid_argument);  // needs a payload
  wire::Header ping;
  CHECK_THROWS_AS(ends.a->send("b", ping, Payload::copy_f32(std::vector<float>{1})), std::invalid_argument);
  CHECK_THROWS_AS(Payload::encoded(Dtype::f16, 4, std::vector<std::uint8_t>(7)), std::invalid_argument);
  CHECK_THROWS_AS(Payload::borrow_f32(std::vector<float>{1}, nullptr), std::invalid_argument);
  CHECK_FALSE(ends.b->receive(Clock::now()));
  // decode_into wants exactly count() destinations.
  ends.a->send("b", push, Payload::copy_f32(std::vector<float>{1, 2}));
  auto message = ends.b->receive(soon());
  REQUIRE(message);
  std::vector<float> wrong(3);
  CHECK_THROWS_AS(message->decode_into(wrong), std::invalid_argument);
}

TEST_CASE("in-process admission refuses what ZeroMQ's refuses and counts it", "[transport]") {
  auto fabric = InprocFabric::create();
  InprocTransport b(fabric, inproc_options("b"));
  wire::Header good = valid_header("mallory", MessageType::ping);
  fabric->inject("b", "mallory", {wire::encode_header(good)});  // accepted (and answered)
  fabric->inject("b", "eve", {wire::encode_header(good)});      // identity differs from sender
  fabric->inject("b", "mallory", {});                           // no frame at all
  fabric->inject("b", "mallory", {std::vector<std::uint8_t>(wire::kMaxHeaderBytes + 1, 0x80)});
  fabric->inject("b", "mallory", {{0xc1}});  // never-used MessagePack byte
  auto nan = nan_push("mallory");
  fabric->inject("b", "mallory", nan);
  const Counters c = b.counters();
  CHECK(c.accepted == 1);
  CHECK(c[DropReason::spoofed_sender] == 1);
  CHECK(c[DropReason::bad_frame_count] == 1);
  CHECK(c[DropReason::header_too_large] == 1);
  CHECK(c[DropReason::bad_msgpack] == 1);
  CHECK(c[DropReason::non_finite] == 1);
  CHECK_FALSE(b.receive(Clock::now()));
}

TEST_CASE("a receiver that does not keep up pushes back on in-process senders", "[transport]") {
  auto fabric = InprocFabric::create();
  InprocOptions small = inproc_options("b");
  small.inbox.max_messages = 2;
  InprocTransport a(fabric, inproc_options("a")), b(fabric, small);
  a.connect("b", b.address());
  // A data message: control messages (bye, members, ...) never push back.
  wire::Header pull;
  pull.type = MessageType::params_pull;
  a.send("b", pull);
  a.send("b", pull);
  try {
    a.send("b", pull);
    FAIL("third message into a full inbox did not throw");
  } catch (const PeerError& e) {
    CHECK(e.failure() == PeerFailure::backpressure);
  }
  REQUIRE(b.receive(soon()));
  a.send("b", pull);  // room again
}

TEST_CASE("in-process endpoints on their own threads ping and push to each other at once", "[transport]") {
  auto fabric = InprocFabric::create();
  const std::vector<std::string> ids{"p0", "p1", "p2", "p3"};
  std::vector<std::unique_ptr<InprocTransport>> peers;
  for (const auto& id : ids) peers.push_back(std::make_unique<InprocTransport>(fabric, inproc_options(id)));
  for (auto& p : peers)
    for (const auto& id : ids)
      if (id != p->id()) p->connect(id, InprocFabric::address_for(id));
  std::vector<std::vector<float>> got(ids.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < ids.size(); ++i)
    threads.emplace_back([&, i] {
      Transport& self = *peers[i];
      for (const auto& other : ids) {
        if (other == self.id()) continue;
        self.ping(other, soon());  // pings cross each other: the fabric must not deadlock
        wire::Header push;
        push.type = MessageType::params_push;
        self.send(other, push, Payload::copy_f32(std::vector<float>{static_cast<float>(i)}));
      }
      for (std::size_t k = 0; k + 1 < ids.size(); ++k)
        if (auto m = self.receive(soon())) got[i].push_back(m->decode().at(0));
    });
  for (auto& t : threads) t.join();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    std::sort(got[i].begin(), got[i].end());
    std::vector<float> expect;
    for (std::size_t j = 0; j < ids.size(); ++j)
      if (j != i) expect.push_back(static_cast<float>(j));
    CHECK(got[i] == expect);
  }
}

TEST_CASE("a killed in-process endpoint is a PeerError naming it", "[transport]") {
  Endpoints ends = make_endpoints(Kind::inproc);
  auto* fabric = ends.fabric.get();
  std::thread serving([&] {
    try {
      serve_pulls(*ends.b);
    } catch (const TransportError&) {
      // Killed: the endpoint's own calls fail from now on.
    }
  });
  wire::Header pull;
  pull.type = MessageType::params_pull;
  for (int i = 0; i < 3; ++i)
    REQUIRE(ends.a->request("b", pull, {}, soon()).type() == MessageType::params_reply);
  fabric->kill("b");
  serving.join();
  require_peer_error(*ends.a, "b", ends.b->address(), PeerFailure::disconnected, soon());
  CHECK_THROWS_AS(ends.a->send("b", pull), PeerError);
}

TEST_CASE("a ZeroMQ peer killed mid-conversation is a PeerError naming it", "[transport][process]") {
  ChildPeer child = ChildPeer::spawn("child");
  ZmqTransport a(zmq_options("a", Kind::tcp));
  a.connect("child", child.address());
  wire::Header pull;
  pull.type = MessageType::params_pull;
  for (int i = 0; i < 3; ++i) {
    Message reply = a.request("child", pull, {}, soon());
    REQUIRE(reply.type() == MessageType::params_reply);
    REQUIRE(reply.count() == 16);
  }
  child.kill();
  // The kernel closes a killed process's sockets, so the loss is seen at once; the
  // deadline only bounds a hang.
  const auto deadline = Clock::now() + 15s;
  require_peer_error(a, "child", child.address(), PeerFailure::disconnected, deadline);
}

TEST_CASE("transport child peer process", "[.transport_child]") { run_child_peer_if_spawned(); }

TEST_CASE("a ZeroMQ peer nobody listens for is a PeerError(unreachable)", "[transport]") {
  std::string address;
  {
    ZmqTransport gone(zmq_options("gone", Kind::tcp));
    address = gone.address();
  }
  ZmqOptions options = zmq_options("a", Kind::tcp);
  options.connect_timeout = 300ms;
  ZmqTransport a(options);
  a.connect("gone", address);
  require_peer_error(a, "gone", address, PeerFailure::unreachable, Clock::now() + 15s);
}

TEST_CASE("addresses parse into endpoint and CURVE key and bad ones are refused", "[transport]") {
  const std::string key = transport::generate_curve_keypair().public_z85;
  auto parsed = parse_address("tcp://127.0.0.1:5555#" + key);
  CHECK(parsed.endpoint == "tcp://127.0.0.1:5555");
  CHECK(parsed.server_key == key);
  CHECK(parse_address("ipc:///tmp/x.sock").server_key.empty());
  CHECK(format_address("tcp://h:1", key) == "tcp://h:1#" + key);
  CHECK_THROWS_AS(parse_address("tcp://127.0.0.1:5555#short"), TransportError);
  CHECK_THROWS_AS(parse_address("tcp://127.0.0.1:*"), TransportError);
  CHECK_THROWS_AS(parse_address("udp://127.0.0.1:5555"), TransportError);
  CHECK_THROWS_AS(parse_address("tcp://host-without-port"), TransportError);
  ZmqTransport plain(zmq_options("a", Kind::tcp));
  CHECK_THROWS_AS(plain.connect("b", "tcp://127.0.0.1:5555#" + key), TransportError);
  ZmqTransport secure(zmq_options("c", Kind::curve));
  CHECK_THROWS_AS(secure.connect("b", "tcp://127.0.0.1:5555"), TransportError);
  CHECK_THROWS_AS(ZmqTransport(zmq_options("a", Kind::tcp, "tcp://256.0.0.1:1")), TransportError);
  ZmqOptions no_keys = zmq_options("a", Kind::tcp);
  no_keys.security.insecure = false;
  CHECK_THROWS_AS(ZmqTransport(no_keys), TransportError);
}

TEST_CASE("ten thousand hostile messages are all counted and the endpoint still answers", "[transport]") {
  ZmqTransport target(zmq_options("target", Kind::tcp));
  zmq::context_t context;
  zmq::socket_t raw(context, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::routing_id, "flood");
  raw.set(zmq::sockopt::linger, 0);
  raw.connect(target.address());
  Rng rng(2024);
  const FloodTally sent = send_flood(raw, rng, 10'000);
  REQUIRE(sent.total == 10'000);

  // Drain accepted messages so a full inbox never stops the reading, until every
  // message is accounted for.
  const auto deadline = Clock::now() + 60s;
  auto counted = [&] {
    const Counters c = target.counters();
    return c.accepted + c.total_dropped();
  };
  std::uint64_t received = 0;
  while (counted() < sent.total && Clock::now() < deadline) {
    if (target.receive(Clock::now() + 50ms)) ++received;
  }
  while (target.receive(Clock::now())) ++received;
  const Counters c = target.counters();
  INFO("accepted " << c.accepted << ", dropped " << c.total_dropped());
  REQUIRE(c.accepted + c.total_dropped() == sent.total);
  CHECK(received <= c.accepted);
  CHECK(c.accepted >= sent.valid);
  CHECK(c[DropReason::non_finite] == sent.non_finite);
  CHECK(c[DropReason::bad_checksum] == sent.bad_checksum);
  CHECK(c[DropReason::header_too_large] == sent.too_large);
  CHECK(c[DropReason::bad_frame_count] >= sent.wrong_frames);
  CHECK(c[DropReason::size_mismatch] >= sent.truncated + sent.giant);
  CHECK(c[DropReason::spoofed_sender] >= sent.spoofed);

  // Still alive: a valid ping from the same raw socket gets its pong.
  REQUIRE(raw_ping(raw, "flood", 0xfeed, deadline));
  CHECK(target.counters().accepted == c.accepted + 1);
}

TEST_CASE("ZeroMQ refuses frames above the size limit without harm", "[transport]") {
  ZmqOptions options = zmq_options("target", Kind::tcp);
  options.max_payload_bytes = 1 << 20;
  ZmqTransport target(options);
  zmq::context_t context;
  zmq::socket_t raw(context, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::routing_id, "big");
  raw.set(zmq::sockopt::linger, 0);
  raw.connect(target.address());
  const std::vector<float> huge(1 << 19, 1.0f);  // 2 MiB payload
  wire::Header h = valid_header("big", MessageType::params_push);
  h.dtype = Dtype::f32;
  h.count = huge.size();
  const auto bytes = std::as_bytes(std::span(huge));
  h.checksum = wire::checksum({reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()});
  const auto header = wire::encode_header(h);
  raw.send(zmq::buffer(header), zmq::send_flags::sndmore);
  raw.send(zmq::buffer(huge));
  // ZeroMQ drops the connection; the socket reconnects and a ping still gets through.
  REQUIRE(raw_ping(raw, "big", 7, Clock::now() + 30s, 500ms));
  CHECK_FALSE(target.receive(Clock::now()));
  // The giant frame never reached admission: only pings were counted.
  CHECK(target.counters().total_dropped() == 0);
  CHECK(target.counters().accepted >= 1);
}

TEST_CASE("CURVE lets authorized peers talk and refuses and logs the others", "[transport]") {
  logging::CapturedLines log(logging::Level::warn);
  Endpoints ends = make_endpoints(Kind::curve);
  wire::Header push;
  push.type = MessageType::params_push;
  ends.a->send("b", push, Payload::copy_f32(std::vector<float>{4, 5}));
  auto message = ends.b->receive(soon());
  REQUIRE(message);
  CHECK(message->decode() == std::vector<float>{4, 5});

  SECTION("a key that is not authorized") {
    ZmqOptions stranger_options = zmq_options("stranger", Kind::curve);
    stranger_options.security.authorized = authorize({ends.keys_b.public_z85});
    ZmqTransport stranger(stranger_options);
    stranger.connect("b", ends.b->address());
    stranger.send("b", push, Payload::copy_f32(std::vector<float>{6}));
    // The ZAP handler logs before it answers, so the refusal is logged by the time the
    // stranger learns of it.
    require_peer_error(stranger, "b", ends.b->address(), PeerFailure::refused, soon());
    CHECK(log_has(log, stranger.public_key()));
  }
  SECTION("a client without CURVE, again and again") {
    // Each attempt comes from a new ephemeral port: keyed by host and port, a client that
    // kept retrying logged a line per attempt (47 in 6 s). Now a host's refusals are
    // logged on the 1st, 2nd, 4th, 8th and 16th. (An attempt whose address the monitor
    // could not read counts as "an unknown address": at most one more such series.)
    zmq::context_t context;
    std::vector<zmq::socket_t> attempts;
    for (int attempt = 0; attempt < 16; ++attempt) {
      auto& raw = attempts.emplace_back(context, zmq::socket_type::dealer);
      raw.set(zmq::sockopt::routing_id, "plain");
      raw.set(zmq::sockopt::linger, 0);
      raw.connect(parse_address(ends.b->address()).endpoint);
      wire::Header ping = valid_header("plain", MessageType::ping);
      raw.send(zmq::buffer(wire::encode_header(ping)));
    }
    const auto deadline = Clock::now() + 30s;
    while (!log_has(log, "(16 times so far)") && Clock::now() < deadline)
      REQUIRE_FALSE(ends.b->receive(Clock::now() + 50ms));
    int lines = 0;
    for (const auto& line : log.lines())
      lines += line.message.find("failed the CURVE handshake") != std::string::npos;
    CHECK(lines >= 1);
    CHECK(lines <= 10);  // 5 + 5 at most; one per attempt was 16
    CHECK(log_has(log, "times so far)"));
  }
  CHECK_FALSE(ends.b->receive(Clock::now() + 100ms));
  CHECK(ends.b->counters().accepted == 1);
}

TEST_CASE("the in-process fabric loses the set fraction of messages, never pings", "[transport]") {
  Endpoints ends = make_endpoints(Kind::inproc);
  CHECK_THROWS_AS(ends.fabric->set_loss(1.5, 1), std::invalid_argument);
  CHECK_THROWS_AS(ends.fabric->set_loss(-0.1, 1), std::invalid_argument);
  ends.fabric->set_loss(0.25, 3);
  constexpr std::uint64_t sent = 4000;
  std::uint64_t received = 0;
  for (std::uint64_t i = 0; i < sent; ++i) {
    wire::Header push;
    push.type = MessageType::params_push;
    push.step = i;
    ends.a->send("b", push, Payload::copy_f32(std::vector<float>{1, 2}));  // never throws: loss is silent
    if (ends.b->receive(Clock::now())) ++received;
  }
  CHECK(ends.fabric->dropped_by_loss() == sent - received);
  // Binomial(4000, 0.25): mean 1000, standard deviation 27; 6 deviations either side.
  CHECK(ends.fabric->dropped_by_loss() > 1000 - 165);
  CHECK(ends.fabric->dropped_by_loss() < 1000 + 165);
  // PINGs and their PONGs are never lost, even on a link that loses most messages.
  ends.fabric->set_loss(0.9, 4);
  for (int i = 0; i < 50; ++i) CHECK_NOTHROW(ends.a->ping("b", soon()));
  ends.fabric->set_loss(0, 0);
  const auto dropped = ends.fabric->dropped_by_loss();
  wire::Header push;
  push.type = MessageType::params_push;
  ends.a->send("b", push, Payload::copy_f32(std::vector<float>{3}));
  CHECK(ends.b->receive(soon()));
  CHECK(ends.fabric->dropped_by_loss() == dropped);
}
