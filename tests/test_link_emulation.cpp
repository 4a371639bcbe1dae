// Link emulation and partitions: the delay line on its own (timing, order, loss, item
// ownership, no sockets), then EmulatedTransports around real ZmqTransports on
// tcp://127.0.0.1 with emulated latency, bandwidth, loss and blocked peers. Timing checks are lower bounds
// (physics of the emulated link); upper bounds are generous, as the machine is shared.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gossip/network/emulation/emulated_transport.hpp"
#include "gossip/network/emulation/link_emulator.hpp"
#include "gossip/network/transport/zmq_transport.hpp"
#include "link_emulation_test_util.hpp"
#include "transport_test_util.hpp"

using namespace hearsay;
using namespace hearsay::emulation;
using namespace hearsay::transport;
using namespace hearsay::transport::testing;
using hearsay::emulation::testing::own_link;
using namespace std::chrono_literals;
using wire::MessageType;

namespace {

// The items pop_due hands out at `now`, in order.
template <class Item>
std::vector<Item> due(LinkEmulator<Item>& line, Clock::time_point now) {
  std::vector<Item> out;
  line.pop_due(now, [&](Item& item) { out.push_back(std::move(item)); });
  return out;
}

// A ZeroMQ transport (insecure tcp, zmq_options) inside link emulation, as a peer builds it;
// the same send queue and linger for both, as the peer gives them.
std::unique_ptr<EmulatedTransport> emulated_zmq(const std::string& id, const LinkEmulation& links,
                                                int send_queue = 64, std::chrono::milliseconds linger = 0ms) {
  ZmqOptions o = zmq_options(id, Kind::tcp);
  o.send_queue = send_queue;
  o.linger = linger;
  EmulationOptions e;
  e.links = links;
  e.send_queue = send_queue;
  e.linger = linger;
  return std::make_unique<EmulatedTransport>(std::make_unique<ZmqTransport>(o), e);
}

// Two insecure tcp transports "a" (emulating `a_links`) and "b" (emulating `b_links`),
// connected both ways.
struct Pair {
  explicit Pair(const LinkEmulation& a_links, const LinkEmulation& b_links = {}, int send_queue = 64,
                std::chrono::milliseconds a_linger = 0ms) {
    logging::CapturedLines quiet(logging::Level::off);  // the insecure-mode warnings
    a = emulated_zmq("a", a_links, send_queue, a_linger);
    b = emulated_zmq("b", b_links, send_queue);
    a->connect("b", b->address());
    b->connect("a", a->address());
  }
  // Each sees the other go: routine here, not worth a warning in the test's output.
  ~Pair() {
    logging::CapturedLines quiet(logging::Level::off);
    a.reset();
    b.reset();
  }
  Pair(const Pair&) = delete;
  Pair& operator=(const Pair&) = delete;

  std::unique_ptr<EmulatedTransport> a, b;
};

// The steps `a` lost of 2000 params_pulls to `b` over a link with loss 0.3 and `seed`.
std::set<std::uint64_t> lost_steps(std::uint64_t seed) {
  constexpr std::uint64_t kMessages = 2000;
  Pair p(own_link("unlimited,0s,loss=0.3", seed), {}, 4096);
  for (std::uint64_t i = 0; i < kMessages; ++i) p.a->send("b", step_header(MessageType::params_pull, i));
  const EmulationCounters sent = p.a->emulation_counters();
  REQUIRE(sent.lost + sent.delayed == kMessages);
  std::set<std::uint64_t> lost;
  for (std::uint64_t i = 0; i < kMessages; ++i) lost.insert(i);
  std::uint64_t received = 0, last = 0;
  const auto deadline = Clock::now() + 30s;
  while (received < sent.delayed && Clock::now() < deadline) {
    auto m = p.b->receive(deadline);
    if (!m) break;
    if (received > 0) CHECK(m->header().step > last);  // in send order
    last = m->header().step;
    lost.erase(last);
    ++received;
  }
  REQUIRE(received == sent.delayed);
  CHECK_FALSE(p.b->receive(Clock::now() + 50ms));  // and nothing else
  CHECK(lost.size() == sent.lost);
  return lost;
}

}  // namespace

// ---- the delay line on its own ---------------------------------------------------------------

TEST_CASE("the delay line releases a message after its transmit time and its delay", "[link-emulation]") {
  LinkEmulator<int> line(own_link("80mbit,20ms"), "a");
  const auto t0 = Clock::now();
  // 1 MB at 80 Mbit/s is 100 ms on the wire; the second waits for the first.
  REQUIRE(line.push("b", 1'000'000, 1, t0));
  REQUIRE(line.push("b", 1'000'000, 2, t0));
  CHECK(line.queued("b") == 2);
  REQUIRE(line.next_due());
  CHECK(*line.next_due() == t0 + 120ms);
  CHECK(due(line, t0 + 119ms).empty());
  CHECK(due(line, t0 + 120ms) == std::vector<int>{1});
  CHECK(*line.next_due() == t0 + 220ms);
  CHECK(due(line, t0 + 219ms).empty());
  CHECK(due(line, t0 + 10s) == std::vector<int>{2});
  CHECK_FALSE(line.next_due());
  CHECK(line.queued("b") == 0);
  // A message given after the uplink went idle departs when given.
  const auto t1 = t0 + 1s;
  REQUIRE(line.push("b", 1'000, 3, t1));
  CHECK(*line.next_due() == t1 + 100us + 20ms);
}

TEST_CASE("the delay line shares one uplink and orders releases by time", "[link-emulation]") {
  LinkEmulation e;
  e.peers["slow"] = parse_link_spec("8mbit,0s");
  e.peers["far"] = parse_link_spec("unlimited,50ms");
  e.self = parse_link_spec("80mbit,0s");
  LinkEmulator<std::string> line(e, "a");
  const auto t0 = Clock::now();
  // 1 MB holds our 80 Mbit/s uplink for 100 ms, the path to the 8 Mbit/s peer for 1 s.
  REQUIRE(line.push("slow", 1'000'000, "big", t0));
  REQUIRE(line.push("far", 10, "far", t0));           // behind it on the uplink only: 100 ms + 50 ms
  REQUIRE(line.push("other", 10, "other1", t0));      // 100 ms (and 1 us of its own)
  REQUIRE(line.push("other", 10, "other2", t0));      // 2 us later: kept in order
  REQUIRE(line.push("slow", 1'000'000, "big2", t0));  // waits for the path: 2 s
  CHECK(line.size() == 5);
  CHECK(due(line, t0 + 99ms).empty());
  CHECK(due(line, t0 + 101ms) == std::vector<std::string>{"other1", "other2"});
  CHECK(due(line, t0 + 150ms).empty());
  CHECK(due(line, t0 + 151ms) == std::vector<std::string>{"far"});
  CHECK(due(line, t0 + 999ms).empty());
  CHECK(due(line, t0 + 1s) == std::vector<std::string>{"big"});
  CHECK(due(line, t0 + 1999ms).empty());
  CHECK(due(line, t0 + 2s) == std::vector<std::string>{"big2"});
  CHECK(line.empty());
}

TEST_CASE("link emulation picks a peer's own link, else the others' link, combined with ours",
          "[link-emulation]") {
  LinkEmulation e;
  CHECK_FALSE(e.enabled());
  e.peers["b"] = parse_link_spec("unlimited,0s");
  CHECK_FALSE(e.enabled());
  e.self = parse_link_spec("100mbit,5ms,loss=0.1");
  e.others = parse_link_spec("1gbit,20ms");
  e.peers["c"] = parse_link_spec("1mbit,1ms,loss=0.5");
  CHECK(e.enabled());
  const LinkSpec to_b = e.link_to("b");  // b's own link limits nothing: ours alone
  CHECK(to_b.bits_per_second == e.self.bits_per_second);
  CHECK(to_b.delay_seconds == e.self.delay_seconds);
  CHECK(to_b.loss == Approx(e.self.loss));
  const LinkSpec to_c = e.link_to("c");
  CHECK(to_c.bits_per_second == 1e6);
  CHECK(to_c.delay_seconds == Approx(0.005));
  CHECK(to_c.loss == Approx(1 - 0.9 * 0.5));
  const LinkSpec to_d = e.link_to("d");
  CHECK(to_d.bits_per_second == 100e6);
  CHECK(to_d.delay_seconds == Approx(0.020));
  CHECK(describe(e).find("peer 'c' 1mbit,1ms,loss=0.5") != std::string::npos);
}

TEST_CASE("loss draws repeat for the same seed, ids and index and hold the uplink", "[link-emulation]") {
  auto losses = [](std::uint64_t seed, const std::string& self, const std::string& to) {
    LinkSchedule schedule(own_link("unlimited,0s,loss=0.3", seed), self);
    std::vector<bool> lost;
    const auto t0 = Clock::now();
    for (int i = 0; i < 10'000; ++i) lost.push_back(schedule.take(to, 100, t0).lost);
    return lost;
  };
  const auto base = losses(7, "a", "b");
  CHECK(losses(7, "a", "b") == base);
  CHECK(losses(8, "a", "b") != base);
  CHECK(losses(7, "c", "b") != base);
  CHECK(losses(7, "a", "c") != base);
  // 10000 draws at 0.3: mean 3000, standard deviation 46; 10 of them either way.
  const auto count = std::count(base.begin(), base.end(), true);
  CHECK(count > 2540);
  CHECK(count < 3460);

  // A lost message still held the uplink: every 1 MB at 80 Mbit/s takes its 100 ms.
  LinkSchedule schedule(own_link("80mbit,0s,loss=0.5"), "a");
  const auto t0 = Clock::now();
  int lost = 0;
  for (int i = 1; i <= 20; ++i) {
    const LinkSchedule::Slot slot = schedule.take("b", 1'000'000, t0);
    lost += slot.lost ? 1 : 0;
    CHECK(slot.index == static_cast<std::uint64_t>(i - 1));
    CHECK(slot.release == t0 + i * 100ms);
  }
  CHECK(lost > 0);
  CHECK(lost < 20);
}

TEST_CASE("the delay line releases lost items at once and cleared ones when cleared", "[link-emulation]") {
  auto token = std::make_shared<int>(0);
  LinkEmulator<std::shared_ptr<int>> line(own_link("unlimited,1s,loss=0.5", 3), "a");
  const auto t0 = Clock::now();
  std::size_t kept = 0;
  for (int i = 0; i < 100; ++i) kept += line.push("b", 10, token, t0) ? 1 : 0;
  CHECK(kept > 0);
  CHECK(kept < 100);
  CHECK(line.size() == kept);
  CHECK(static_cast<std::size_t>(token.use_count()) == 1 + kept);  // the lost ones are gone
  line.clear();
  CHECK(token.use_count() == 1);
  CHECK(line.queued("b") == 0);
}

// ---- over ZeroMQ ------------------------------------------------------------------------------

TEST_CASE("a message over a 20 ms link arrives no sooner than 20 ms after it was sent", "[link-emulation]") {
  Pair p(own_link("unlimited,20ms"));
  for (std::uint64_t step = 1; step <= 5; ++step) {
    const auto sent = Clock::now();
    push(*p.a, "b", step, 16);
    auto m = p.b->receive(sent + 5s);
    REQUIRE(m);
    const double took = seconds_since(sent);
    INFO("step " << step << " took " << took << " s");
    CHECK(m->header().step == step);
    CHECK(took >= 0.020);
    CHECK(took < 5);
  }
  const EmulationCounters c = p.a->emulation_counters();
  CHECK(c.delayed == 5);
  CHECK(c.lost == 0);
  CHECK(p.b->emulation_counters().delayed == 0);  // b emulates nothing
}

TEST_CASE("messages still in the emulated link when their transport closes are delivered",
          "[link-emulation]") {
  // A peer's last round and its bye leave, as far as it knows, just before it closes: with
  // a slow link they are still in the delay line then, and get the linger to arrive.
  Pair p(own_link("unlimited,50ms"), {}, 64, 1000ms);
  for (std::uint64_t step = 1; step <= 3; ++step) push(*p.a, "b", step, 16);
  {
    logging::CapturedLines quiet(logging::Level::off);
    p.a.reset();  // within its linger (1 s) the messages are due (50 ms)
  }
  // b also learns that a's connection closed; the messages come all the same, in order.
  std::vector<std::uint64_t> steps;
  const auto give_up = Clock::now() + 5s;
  while (steps.size() < 3 && Clock::now() < give_up) {
    try {
      if (auto m = p.b->receive(give_up)) steps.push_back(m->header().step);
    } catch (const PeerError& e) {
      CHECK(e.peer_id() == "a");
    }
  }
  CHECK(steps == std::vector<std::uint64_t>{1, 2, 3});
}

TEST_CASE("pongs cross the emulated link too", "[link-emulation]") {
  Pair p(own_link("unlimited,20ms"), own_link("unlimited,30ms"));
  const auto round_trip = p.a->ping("b", Clock::now() + 5s);
  CHECK(round_trip >= 50ms);
  CHECK(round_trip < 5s);
  CHECK(p.b->emulation_counters().delayed == 1);  // the pong
}

TEST_CASE("1 MB over 80mbit takes 100 ms and a second one waits behind it", "[link-emulation]") {
  Pair p(own_link("80mbit,0s"));
  const auto sent = Clock::now();
  push(*p.a, "b", 1, 250'000);  // 1 MB of f32
  push(*p.a, "b", 2, 250'000);
  const auto [first, second, first_took, second_took] = receive_two_in_order(*p.b, sent);
  INFO("first " << first_took << " s, second " << second_took << " s");
  CHECK(first_took >= 0.100);
  CHECK(second_took >= 0.200);
  CHECK(second_took < 5);
  CHECK(second->count() == 250'000);
}

TEST_CASE("the others' link applies to peers without their own", "[link-emulation]") {
  LinkEmulation e;
  e.others = parse_link_spec("unlimited,40ms");
  e.peers["b"] = parse_link_spec("unlimited,0s");
  Pair p(e);
  logging::CapturedLines quiet(logging::Level::off);
  ZmqTransport c(zmq_options("c", Kind::tcp));
  p.a->connect("c", c.address());
  const auto sent = Clock::now();
  push(*p.a, "c", 1, 4);
  auto m = c.receive(sent + 5s);
  REQUIRE(m);
  CHECK(seconds_since(sent) >= 0.040);
  push(*p.a, "b", 2, 4);  // b's own link has no delay, but its messages pass the delay line too
  REQUIRE(p.b->receive(Clock::now() + 5s));
  CHECK(p.a->emulation_counters().delayed == 2);
}

TEST_CASE("loss=0.3 loses about 30 percent, the same messages for the same seed", "[link-emulation]") {
  const std::set<std::uint64_t> first = lost_steps(11);
  // 2000 draws at 0.3: mean 600, standard deviation 20.5; about 7 of them either way.
  CHECK(first.size() > 450);
  CHECK(first.size() < 750);
  CHECK(lost_steps(11) == first);
  CHECK(lost_steps(12) != first);
}

TEST_CASE("an unknown peer and a full emulated link throw at send as without emulation", "[link-emulation]") {
  Pair p(own_link("unlimited,10s"), {}, 4);
  try {
    push(*p.a, "nobody", 1, 4);
    FAIL("a send to an unknown peer did not throw");
  } catch (const PeerError& e) {
    CHECK(e.failure() == PeerFailure::unknown_peer);
    CHECK(e.peer_id() == "nobody");
  }
  // Four wait for 10 s; the fifth finds the line to b full. Their buffers are released
  // when the transport goes (the test's linger is 0: the delay line is dropped).
  int released = 0;
  std::vector<float> values(8, 1.0f);
  for (std::uint64_t step = 1; step <= 4; ++step) {
    std::shared_ptr<const void> keep_alive(values.data(), [&](const void*) { ++released; });
    p.a->send("b", step_header(MessageType::params_push, step), Payload::borrow_f32(values, keep_alive));
  }
  try {
    push(*p.a, "b", 5, 4);
    FAIL("a send to a full emulated link did not throw");
  } catch (const PeerError& e) {
    CHECK(e.failure() == PeerFailure::backpressure);
    CHECK(e.peer_id() == "b");
  }
  CHECK(p.a->emulation_counters().delayed == 4);
  CHECK(released == 0);
  {
    logging::CapturedLines quiet(logging::Level::off);  // b sees a go
    p.a.reset();
  }
  CHECK(released == 4);
}

TEST_CASE("a delayed message to a peer that left meanwhile surfaces as a PeerError", "[link-emulation]") {
  logging::CapturedLines quiet(logging::Level::off);
  auto emulated_a = emulated_zmq("a", own_link("unlimited,1s"));
  EmulatedTransport& a = *emulated_a;
  auto b = std::make_unique<ZmqTransport>(zmq_options("b", Kind::tcp));
  b->connect("a", a.address());  // a reaches b only through b's connection
  // Before b said anything, a cannot tell it from an unknown peer.
  CHECK_THROWS_AS(a.send("b", step_header(MessageType::params_pull, 0)), PeerError);
  b->send("a", step_header(MessageType::params_pull, 1));
  REQUIRE(a.receive(soon()));
  a.send("b", step_header(MessageType::params_pull, 2));  // due in 1 s; b leaves now
  b.reset();
  require_peer_error(a, "b", "(no address)", PeerFailure::unknown_peer, Clock::now() + 10s);
}

TEST_CASE("blocked peers are cut off both ways, counted, and heal", "[link-emulation]") {
  const bool emulated = GENERATE(false, true);
  INFO((emulated ? "with" : "without") << " link emulation");
  const LinkEmulation links = emulated ? own_link("unlimited,1ms") : LinkEmulation{};
  Pair p(links, links);
  // Connected both ways before the partition.
  push(*p.a, "b", 100, 4);
  REQUIRE(p.b->receive(soon()));

  p.a->set_blocked({"b"});
  push(*p.a, "b", 1, 4);  // dropped without an error
  CHECK(p.a->emulation_counters().blocked_sent == 1);
  push(*p.b, "a", 2, 4);  // dropped on arrival at a
  const auto deadline = Clock::now() + 10s;
  while (p.a->emulation_counters().blocked_received < 1 && Clock::now() < deadline)
    REQUIRE_FALSE(p.a->receive(Clock::now() + 20ms));
  CHECK(p.a->emulation_counters().blocked_received == 1);
  // Pings are messages too: no pong comes back through the partition.
  CHECK_THROWS_AS(p.b->ping("a", Clock::now() + 300ms), PeerError);
  while (p.a->emulation_counters().blocked_received < 2 && Clock::now() < deadline)
    REQUIRE_FALSE(p.a->receive(Clock::now() + 20ms));
  CHECK(p.a->emulation_counters().blocked_received == 2);
  CHECK(p.a->counters().accepted == 0);  // neither accepted nor dropped as invalid
  CHECK(p.a->counters().total_dropped() == 0);

  p.a->set_blocked({});
  push(*p.a, "b", 3, 4);
  auto to_b = p.b->receive(soon());
  REQUIRE(to_b);
  CHECK(to_b->header().step == 3);  // the first since the partition: step 1 never left
  push(*p.b, "a", 4, 4);
  auto to_a = p.a->receive(soon());
  REQUIRE(to_a);
  CHECK(to_a->header().step == 4);
  const EmulationCounters c = p.a->emulation_counters();
  CHECK(c.blocked_sent == 1);
  CHECK(c.blocked_received == 2);
}

TEST_CASE("a message on its way when its peer is blocked is dropped at its release", "[link-emulation]") {
  Pair p(own_link("unlimited,500ms"));
  push(*p.a, "b", 1, 4);
  p.a->set_blocked({"b"});
  const auto deadline = Clock::now() + 10s;
  while (p.a->emulation_counters().blocked_sent < 1 && Clock::now() < deadline)
    REQUIRE_FALSE(p.b->receive(Clock::now() + 20ms));
  CHECK(p.a->emulation_counters().blocked_sent == 1);
  p.a->set_blocked({});
  push(*p.a, "b", 2, 4);
  auto m = p.b->receive(soon());
  REQUIRE(m);
  CHECK(m->header().step == 2);
}
