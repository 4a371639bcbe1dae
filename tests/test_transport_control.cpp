// The transport's control queue: membership and state-transfer messages go to
// receive_control() and never to receive()/poll()/ready(), data messages the other way
// round; peer errors reach both; a control queue nobody reads never stalls data.
#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <thread>

#include "base/log.hpp"
#include "gossip/network/transport/inproc_transport.hpp"
#include "gossip/network/transport/zmq_transport.hpp"
#include "transport_test_util.hpp"

using namespace hearsay;
using namespace hearsay::transport;
using namespace hearsay::transport::testing;
using namespace std::chrono_literals;
using wire::MessageType;

namespace {

wire::Header control_header(MessageType type, std::uint64_t step) {
  wire::Header h;
  h.type = type;
  h.step = step;
  if (type == MessageType::hello) h.address = "inproc-fabric:a";
  if (type == MessageType::welcome || type == MessageType::members) h.members = {"1:1:a=inproc-fabric:a"};
  return h;
}

void send_push(Transport& from, const std::string& to, std::uint64_t step) {
  wire::Header h;
  h.type = MessageType::params_push;
  h.step = step;
  from.send(to, h, Payload::copy_f32(std::vector<float>{1.0f, 2.0f}));
}

}  // namespace

TEST_CASE("control messages reach only receive_control and data messages only receive", "[transport]") {
  const Kind kind = GENERATE(Kind::inproc, Kind::tcp);
  INFO("transport " << to_string(kind));
  Endpoints ends = make_endpoints(kind);
  const MessageType control_types[] = {MessageType::hello, MessageType::welcome, MessageType::members,
                                       MessageType::bye, MessageType::state_request};
  std::uint64_t step = 0;
  for (MessageType type : control_types) ends.a->send("b", control_header(type, ++step));
  // The data message goes last: once it is received, every control message is queued.
  send_push(*ends.a, "b", 100);
  auto data = ends.b->receive(soon());
  REQUIRE(data);
  CHECK(data->type() == MessageType::params_push);
  CHECK(data->header().step == 100);
  // Only control messages are left, and the data side sees none of them.
  CHECK_FALSE(ends.b->receive(Clock::now() + 50ms));
  CHECK_FALSE(ends.b->poll(Clock::now() + 10ms));
  CHECK_FALSE(ends.b->ready(Clock::now() + 10ms));
  step = 0;
  for (MessageType type : control_types) {
    auto message = ends.b->receive_control(soon());
    REQUIRE(message);
    CHECK(message->type() == type);
    CHECK(message->header().step == ++step);
  }
  // And a data message never shows up on the control side.
  send_push(*ends.a, "b", 101);
  REQUIRE(ends.b->poll(soon()));
  CHECK_FALSE(ends.b->receive_control(Clock::now() + 50ms));
  auto late = ends.b->receive(soon());
  REQUIRE(late);
  CHECK(late->header().step == 101);
}

TEST_CASE("receive_control takes only what its filter accepts and leaves the rest queued", "[transport]") {
  Endpoints ends = make_endpoints(Kind::inproc);
  ends.a->send("b", control_header(MessageType::state_request, 1));
  ends.a->send("b", control_header(MessageType::members, 2));
  auto members =
      ends.b->receive_control(soon(), [](const Message& m) { return m.type() == MessageType::members; });
  REQUIRE(members);
  CHECK(members->header().step == 2);
  auto request = ends.b->receive_control(soon());
  REQUIRE(request);
  CHECK(request->type() == MessageType::state_request);
}

TEST_CASE("a control request waits for its reply on the control side", "[transport]") {
  const Kind kind = GENERATE(Kind::inproc, Kind::tcp);
  INFO("transport " << to_string(kind));
  Endpoints ends = make_endpoints(kind);
  std::thread responder([&] {
    auto hello = ends.b->receive_control(soon());
    if (!hello) return;
    wire::Header welcome = control_header(MessageType::welcome, 7);
    welcome.nonce = hello->header().nonce;
    ends.b->send(hello->sender(), welcome);
  });
  Message reply = ends.a->request("b", control_header(MessageType::hello, 1), Payload{}, soon());
  responder.join();
  CHECK(reply.type() == MessageType::welcome);
  CHECK(reply.header().step == 7);
  CHECK_FALSE(ends.a->receive(Clock::now() + 20ms));
}

TEST_CASE("a killed peer's error surfaces on both the data and the control side", "[transport]") {
  Endpoints ends = make_endpoints(Kind::inproc);
  ends.fabric->kill("b");
  CHECK_THROWS_AS(ends.a->receive(soon()), PeerError);
  CHECK_THROWS_AS(ends.a->receive_control(soon()), PeerError);
  // Each side rethrows it once.
  CHECK_FALSE(ends.a->receive(Clock::now() + 10ms));
  CHECK_FALSE(ends.a->receive_control(Clock::now() + 10ms));
  // A send still fails for the dead peer, whichever side its type belongs to.
  CHECK_THROWS_AS(ends.a->send("b", control_header(MessageType::members, 1)), PeerError);
  CHECK_THROWS_AS(send_push(*ends.a, "b", 1), PeerError);
}

TEST_CASE("an unread control queue drops its oldest messages and never stalls data", "[transport]") {
  auto fabric = InprocFabric::create();
  InprocOptions ob = inproc_options("b");
  ob.inbox.max_messages = 8;
  ob.inbox.max_control_messages = 4;
  InprocTransport a(fabric, inproc_options("a"));
  InprocTransport b(fabric, ob);
  a.connect("b", b.address());
  for (std::uint64_t i = 1; i <= 20; ++i) a.send("b", control_header(MessageType::members, i));
  CHECK(b.control_overflow() == 16);
  send_push(a, "b", 1);  // no backpressure from the control messages
  REQUIRE(b.receive(soon()));
  for (std::uint64_t i = 17; i <= 20; ++i) {
    auto m = b.receive_control(soon());
    REQUIRE(m);
    CHECK(m->header().step == i);
  }
  CHECK_FALSE(b.receive_control(Clock::now() + 10ms));
}

TEST_CASE("wake() ends a ready() wait holding an older ticket, and only those", "[transport]") {
  Endpoints ends = make_endpoints(Kind::inproc);
  const std::uint64_t ticket = ends.b->wake_ticket();
  CHECK_FALSE(ends.b->ready(Clock::now() + 20ms, ticket));  // nothing arrived, nobody woke it
  std::thread waker([&] { ends.b->wake(); });
  CHECK(ends.b->ready(Clock::now() + 30s, ticket));
  waker.join();
  // A wake is not a message: a fresh ticket waits again, and receive() finds nothing.
  CHECK_FALSE(ends.b->ready(Clock::now() + 20ms, ends.b->wake_ticket()));
  CHECK_FALSE(ends.b->receive(Clock::now()));
}

TEST_CASE("a message's f32 values are read in place when aligned and decoded otherwise", "[transport]") {
  const std::vector<float> values = {1.5f, -2.0f, 3.25f};
  wire::Header h;
  h.type = MessageType::params_push;
  h.dtype = wire::Dtype::f32;
  h.count = values.size();
  // Aligned: the view is the payload memory itself, no copy.
  auto aligned = std::make_shared<std::vector<float>>(values);
  const Message in_place(h, {reinterpret_cast<const std::uint8_t*>(aligned->data()), 12}, aligned);
  CHECK(in_place.f32_view().data() == aligned->data());
  std::vector<float> scratch;
  CHECK(in_place.values(scratch).data() == aligned->data());
  CHECK(scratch.empty());
  // One byte off: decoded into the scratch buffer instead.
  auto shifted = std::make_shared<std::vector<std::uint8_t>>(13);
  std::memcpy(shifted->data() + 1, values.data(), 12);
  const Message odd(h, {shifted->data() + 1, 12}, shifted);
  CHECK(odd.f32_view().empty());
  const auto decoded = odd.values(scratch);
  CHECK(std::vector<float>(decoded.begin(), decoded.end()) == values);
  CHECK(decoded.data() == scratch.data());
  // Another dtype is always decoded.
  const Payload half = Payload::encode(wire::Dtype::f16, values);
  wire::Header hh = h;
  hh.dtype = wire::Dtype::f16;
  const Message f16(hh, half.bytes(), half.owner());
  CHECK(f16.f32_view().empty());
  CHECK(std::vector<float>(f16.values(scratch).begin(), f16.values(scratch).end()) == values);
}

// The I/O thread stops reading while the inbox is full; ZeroMQ signals an arrival only
// once, so what waited meanwhile must be read when room comes back, on the ROUTER (a
// peer that connected to us) and on a DEALER (a peer we connected to) alike.
TEST_CASE("a ZeroMQ receiver whose inbox was full reads every waiting message once it has room",
          "[transport]") {
  logging::CapturedLines quiet(logging::Level::off);  // the insecure-mode warnings
  for (const bool via_dealer : {false, true}) {
    DYNAMIC_SECTION((via_dealer ? "on b's DEALER" : "on b's ROUTER")) {
      ZmqOptions ob = zmq_options("b", Kind::tcp);
      ob.inbox.max_messages = 3;
      ZmqTransport a(zmq_options("a", Kind::tcp)), b(ob);
      if (via_dealer) {
        // a answers over its ROUTER once b's first message told it b's routing id.
        b.connect("a", a.address());
        send_push(b, "a", 0);
        REQUIRE(a.receive(soon()));
      } else {
        a.connect("b", b.address());
      }
      constexpr std::uint64_t kMessages = 40;  // within a's send queue: none pushes back
      for (std::uint64_t i = 1; i <= kMessages; ++i) send_push(a, "b", i);
      for (std::uint64_t i = 1; i <= kMessages; ++i) {
        auto message = b.receive(soon());
        REQUIRE(message);
        CHECK(message->header().step == i);
      }
      CHECK_FALSE(b.receive(Clock::now() + 50ms));
    }
  }
}
