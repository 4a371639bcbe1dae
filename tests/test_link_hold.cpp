// Link emulation held at the receiver (EmulationOptions::hold_at_receiver, Inbox's
// set_hold_until_due): the sender stamps each message with the moment its emulated link
// delivers it and sends it at once; the receiver's inbox keeps it out of sight until then.
// The timing bounds follow test_emulated_transport.cpp: an arrival can never come before
// its due, and the upper bounds only allow for a busy machine.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gossip/network/emulation/emulated_transport.hpp"
#include "gossip/network/transport/inbox.hpp"
#include "gossip/network/transport/inproc_transport.hpp"
#include "gossip/network/wire/header.hpp"
#include "sim/fault_spec.hpp"
#include "sim/peer_setup.hpp"
#include "sim/sim_config.hpp"
#include "transport_test_util.hpp"

using namespace hearsay;
using namespace hearsay::emulation;
using namespace hearsay::transport;
using namespace hearsay::transport::testing;
using namespace std::chrono_literals;
using wire::MessageType;

namespace {

EmulationOptions held_link(const std::string& spec, std::uint64_t seed = 0, int queue = 64) {
  EmulationOptions o;
  o.links.self = parse_link_spec(spec);
  o.links.seed = seed;
  o.send_queue = queue;
  o.hold_at_receiver = true;
  return o;
}

// Endpoints "a" and "b" on one fabric, each inside link emulation, connected both ways.
struct HeldFabric {
  explicit HeldFabric(EmulationOptions a_options, EmulationOptions b_options) {
    a = std::make_unique<EmulatedTransport>(std::make_unique<InprocTransport>(fabric, inproc_options("a")),
                                            std::move(a_options));
    b = std::make_unique<EmulatedTransport>(std::make_unique<InprocTransport>(fabric, inproc_options("b")),
                                            std::move(b_options));
    a->connect("b", b->address());
    b->connect("a", a->address());
  }
  std::shared_ptr<InprocFabric> fabric = InprocFabric::create();
  std::unique_ptr<EmulatedTransport> a, b;
};

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::uint64_t due_in(Clock::duration d) { return due_ns_of(Clock::now() + d); }

// A message from `sender` with step `step`, due at `due_ns` (0: none).
Message message_from(const std::string& sender, std::uint64_t step, std::uint64_t due_ns) {
  wire::Header h = step_header(MessageType::params_pull, step);
  h.sender = sender;
  h.due_ns = due_ns;
  return Message(std::move(h), {}, nullptr);
}

}  // namespace

TEST_CASE("held at the receiver, 1 MB over 80mbit,20ms arrives after 120 ms, the next after 220 ms",
          "[link-hold][link-emulation]") {
  // The same link and bounds as the sender-held case: the fabric delivers at once, so here
  // it is the receiver's inbox alone that keeps each message until its due.
  HeldFabric f(held_link("80mbit,20ms"), held_link("unlimited,0s"));
  const auto sent = Clock::now();
  push(*f.a, "b", 1, 250'000);
  push(*f.a, "b", 2, 250'000);
  CHECK_FALSE(f.b->receive(Clock::now()));  // both arrived, neither is due
  auto first = f.b->receive(sent + 5s);
  REQUIRE(first);
  const double first_took = seconds_since(sent);
  auto second = f.b->receive(sent + 5s);
  REQUIRE(second);
  const double second_took = seconds_since(sent);
  INFO("first " << first_took << " s, second " << second_took << " s");
  CHECK(first->header().step == 1);
  CHECK(second->header().step == 2);
  CHECK(first_took >= 0.120);
  CHECK(first_took < 0.120 + 0.5);
  CHECK(second_took >= 0.220);
  CHECK(second_took < 0.220 + 0.5);
  // Its arrival, as its reader sees it, is its due.
  CHECK(first->received_at() == due_time(first->header().due_ns));
  CHECK(due_time(second->header().due_ns) - due_time(first->header().due_ns) >= 100ms);
  CHECK(f.a->emulation_counters().delayed == 2);
}

TEST_CASE("held at the receiver, loss and the send queue are the sender's, as when it holds them",
          "[link-hold][link-emulation]") {
  constexpr std::uint64_t kMessages = 500, kSeed = 5;
  LinkSchedule schedule(held_link("unlimited,0s,loss=0.3", kSeed).links, "a");
  std::set<std::uint64_t> expected_lost;
  for (std::uint64_t i = 0; i < kMessages; ++i)
    if (schedule.take("b", 0, Clock::now()).lost) expected_lost.insert(i);
  {
    HeldFabric f(held_link("unlimited,0s,loss=0.3", kSeed, 4096), held_link("unlimited,0s"));
    for (std::uint64_t i = 0; i < kMessages; ++i) f.a->send("b", step_header(MessageType::params_pull, i));
    CHECK(f.a->emulation_counters().lost == expected_lost.size());
    std::vector<std::uint64_t> received, expected;
    for (std::uint64_t i = 0; i < kMessages; ++i)
      if (!expected_lost.contains(i)) expected.push_back(i);
    while (received.size() < expected.size()) {
      auto m = f.b->receive(soon());
      REQUIRE(m);
      received.push_back(m->header().step);
    }
    CHECK(received == expected);
  }
  // Three messages on a 10 s link fill a send queue of 3: the fourth is refused at send.
  HeldFabric f(held_link("unlimited,10s", 0, 3), held_link("unlimited,0s"));
  for (std::uint64_t step = 1; step <= 3; ++step) push(*f.a, "b", step, 4);
  try {
    push(*f.a, "b", 4, 4);
    FAIL("a send to a full emulated link did not throw");
  } catch (const PeerError& e) {
    CHECK(e.failure() == PeerFailure::backpressure);
    CHECK(e.peer_id() == "b");
  }
  CHECK_FALSE(f.b->receive(Clock::now() + 20ms));  // arrived, but 10 s from due
}

TEST_CASE("held at the receiver, a ping's round trip crosses both emulated links",
          "[link-hold][link-emulation]") {
  HeldFabric f(held_link("unlimited,20ms"), held_link("unlimited,30ms"));
  const auto round_trip = f.a->ping("b", Clock::now() + 5s);
  CHECK(round_trip >= 50ms);
  CHECK(round_trip < 50ms + 500ms);
}

TEST_CASE("an inbox that holds until due: one sender's order kept, other senders not kept waiting",
          "[link-hold][inbox]") {
  Inbox inbox(Inbox::Limits{});
  inbox.set_hold_until_due(true);
  inbox.push(message_from("x", 1, due_in(300ms)));
  inbox.push(message_from("x", 2, due_in(-1s)));  // due already, but behind x's first
  inbox.push(message_from("y", 7, 0));            // no due: at once
  inbox.push(message_from("z", 8, due_in(-1s)));  // due already: at once
  CHECK(inbox.size() == 2);
  const auto first = inbox.pop(Clock::now() + 5s);
  const auto second = inbox.pop(Clock::now() + 5s);
  REQUIRE(first);
  REQUIRE(second);
  CHECK(std::set<std::string>{first->sender(), second->sender()} == std::set<std::string>{"y", "z"});
  CHECK_FALSE(inbox.pop(Clock::now() + 20ms));  // x's are not due yet
  CHECK_FALSE(inbox.ready(Clock::now() + 20ms));
  const auto x1 = inbox.pop(Clock::now() + 5s);
  REQUIRE(x1);
  CHECK(x1->header().step == 1);
  CHECK(Clock::now() >= due_time(x1->header().due_ns));
  const auto x2 = inbox.pop(Clock::now() + 5s);
  REQUIRE(x2);
  CHECK(x2->header().step == 2);

  // A wait that began before the message came ends at its due, with nothing else pushed.
  inbox.push(message_from("x", 3, due_in(100ms)));
  CHECK(inbox.wait(Clock::now() + 5s));
  CHECK(inbox.size() == 1);

  // Without holding, a `due` changes nothing.
  Inbox plain(Inbox::Limits{});
  plain.push(message_from("x", 1, due_in(10s)));
  CHECK(plain.size() == 1);
}

TEST_CASE("a message's due travels in its header, and the simulator's peers hold at the receiver",
          "[link-hold]") {
  wire::Header h;
  h.type = MessageType::ping;
  h.sender = "a";
  h.run_id = "r";
  h.fingerprint = "f";
  h.due_ns = 987'654'321'000;
  const auto said = wire::decode_header(wire::encode_header(h));
  REQUIRE(said.header);
  CHECK(said.header->due_ns == 987'654'321'000);
  h.due_ns = 0;  // none: absent, read back as 0
  const auto unsaid = wire::decode_header(wire::encode_header(h));
  REQUIRE(unsaid.header);
  CHECK(unsaid.header->due_ns == 0);

  // The simulator's peers share this machine's clock: every one holds at the receiver,
  // with links or without, and leaves evaluation to the simulator but for its final one.
  for (const std::string link : {"", "1gbit,1ms"}) {
    sim::SimConfig cfg;
    cfg.peers = 4;
    cfg.link = link;
    const auto args = sim::peer_arguments(cfg, {}, "/bin/hearsay", "dpsgd", 1, 7, "run-x", "/tmp/run");
    auto has = [&](const std::string& flag, const std::string& value) {
      for (std::size_t i = 0; i + 1 < args.size(); ++i)
        if (args[i] == flag && args[i + 1] == value) return true;
      return false;
    };
    CHECK(has("--link-hold-at", "receiver"));
    CHECK(has("--epoch-eval", "false"));
  }
}
