// Links that duplicate and reorder (LinkSpec's dup=P and reorder=P): the draws on their
// own, then a ZeroMQ pair whose link sends some messages twice and holds some back, as a
// flaky network or a retransmitting middlebox would. The receiving transport passes both
// on: what to do with a copy or a late message is the algorithm's business. Then a link
// that turns slow during a run and heals (EmulatedTransport::set_own_link).
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
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

struct Draws {
  std::vector<bool> lost, duplicated, reordered;
  bool operator==(const Draws&) const = default;
};

Draws draws(const std::string& spec, std::uint64_t seed) {
  LinkSchedule schedule(own_link(spec, seed), "a");
  Draws d;
  const auto t0 = Clock::now();
  for (int i = 0; i < 10'000; ++i) {
    const LinkSchedule::Slot s = schedule.take("b", 100, t0);
    d.lost.push_back(s.lost);
    d.duplicated.push_back(s.duplicated);
    d.reordered.push_back(s.reordered);
    if (s.lost) CHECK_FALSE((s.duplicated || s.reordered));  // a lost message is neither
    // A reordered message is held kReorderHold past the link's delay (10 ms here: 0s delay).
    CHECK(s.release == t0 + (s.reordered ? std::chrono::round<Clock::duration>(
                                               std::chrono::duration<double>(LinkSpec::kReorderHold))
                                         : Clock::duration{}));
  }
  return d;
}

std::int64_t count(const std::vector<bool>& v) { return std::count(v.begin(), v.end(), true); }

}  // namespace

TEST_CASE("dup and reorder draws repeat for a seed, are independent of loss, and come at their rates",
          "[link-emulation]") {
  const Draws base = draws("unlimited,0s,loss=0.2,dup=0.3,reorder=0.1", 7);
  CHECK(draws("unlimited,0s,loss=0.2,dup=0.3,reorder=0.1", 7) == base);
  CHECK(draws("unlimited,0s,loss=0.2,dup=0.3,reorder=0.1", 8) != base);
  // The loss draws are the same with or without dup and reorder: adding them to a link
  // changes nothing else of a run that repeats a seed.
  CHECK(draws("unlimited,0s,loss=0.2", 7).lost == base.lost);
  // Of 10000 messages 8000 are kept; 30% of those duplicated (sd 41), 10% reordered (sd 27):
  // bounds of about 10 standard deviations.
  CHECK(count(base.lost) > 1600);
  CHECK(count(base.lost) < 2400);
  CHECK(count(base.duplicated) > 2000);
  CHECK(count(base.duplicated) < 2800);
  CHECK(count(base.reordered) > 530);
  CHECK(count(base.reordered) < 1070);
  // Duplication and reordering are drawn apart: both happen to some messages, not all.
  std::int64_t both = 0;
  for (std::size_t i = 0; i < base.lost.size(); ++i) both += base.duplicated[i] && base.reordered[i];
  CHECK(both > 50);
  CHECK(both < count(base.reordered));
}

TEST_CASE("the delay line releases a duplicated item twice and a held-back one after later ones",
          "[link-emulation]") {
  LinkEmulator<int> line(own_link("unlimited,1ms,dup=0.5,reorder=0.5", 3), "a");
  const auto t0 = Clock::now();
  int copies = 0, held = 0;
  for (int i = 0; i < 200; ++i) {
    const auto sent = line.push_timed("b", 10, i, t0 + i * 1ms);
    REQUIRE(sent);
    copies += sent->copies;
    held += sent->reordered ? 1 : 0;
  }
  CHECK(line.size() == static_cast<std::size_t>(copies));
  CHECK(copies > 200);
  CHECK(held > 0);
  std::vector<int> order;
  line.pop_due(t0 + 1h, [&](int& item) { order.push_back(item); });
  CHECK(order.size() == static_cast<std::size_t>(copies));
  CHECK_FALSE(std::is_sorted(order.begin(), order.end()));  // some were overtaken
  std::map<int, int> seen;
  for (const int i : order) ++seen[i];
  CHECK(seen.size() == 200);  // every item, none lost
}

TEST_CASE("over ZeroMQ a dup and reorder link delivers every message, some twice, some late",
          "[link-emulation]") {
  constexpr std::uint64_t kMessages = 1000;
  logging::CapturedLines quiet(logging::Level::off);  // the insecure-mode warnings
  auto make = [](const std::string& id, const LinkEmulation& links) {
    ZmqOptions o = zmq_options(id, Kind::tcp);
    o.send_queue = 4096;
    EmulationOptions e;
    e.links = links;
    e.send_queue = 4096;
    e.linger = 0ms;
    return std::make_unique<EmulatedTransport>(std::make_unique<ZmqTransport>(o), e);
  };
  auto a = make("a", own_link("unlimited,0s,dup=0.2,reorder=0.2", 11));
  auto b = make("b", {});
  a->connect("b", b->address());
  b->connect("a", a->address());
  for (std::uint64_t i = 0; i < kMessages; ++i) a->send("b", step_header(MessageType::params_pull, i));
  const EmulationCounters sent = a->emulation_counters();
  CHECK(sent.lost == 0);
  CHECK(sent.delayed == kMessages);
  CHECK(sent.duplicated > 100);
  CHECK(sent.reordered > 100);
  std::map<std::uint64_t, int> seen;
  std::uint64_t received = 0, overtaken = 0, last = 0;
  const std::uint64_t expected = kMessages + sent.duplicated;
  const auto deadline = Clock::now() + 30s;
  while (received < expected && Clock::now() < deadline) {
    auto m = b->receive(deadline);
    if (!m) break;
    const std::uint64_t step = m->header().step;
    if (received > 0 && step < last) ++overtaken;
    last = step;
    ++seen[step];
    ++received;
  }
  REQUIRE(received == expected);
  CHECK_FALSE(b->receive(Clock::now() + 50ms));  // and nothing else
  CHECK(seen.size() == kMessages);
  std::uint64_t twice = 0;
  for (const auto& [step, n] : seen) {
    CHECK(n <= 2);
    twice += n == 2;
  }
  CHECK(twice == sent.duplicated);
  CHECK(overtaken > 0);
  a.reset();
  b.reset();
}

TEST_CASE("a transport's own link turns slow while it runs and heals, without a delay line before it",
          "[link-emulation]") {
  // The schedule alone: every destination's link follows the new own link.
  LinkSchedule schedule(own_link("unlimited,0s"), "a");
  const auto t0 = Clock::now();
  CHECK(schedule.take("b", 100, t0).release == t0);
  schedule.set_self(parse_link_spec("unlimited,20ms"));
  CHECK(schedule.take("b", 100, t0).release == t0 + 20ms);
  CHECK(schedule.take("c", 100, t0).release == t0 + 20ms);  // one not seen before too
  schedule.set_self(parse_link_spec("unlimited,0s"));
  CHECK(schedule.take("b", 100, t0).release == t0);

  logging::CapturedLines quiet(logging::Level::off);  // the insecure-mode warnings
  auto make = [](const std::string& id, bool may_change) {
    ZmqOptions o = zmq_options(id, Kind::tcp);
    EmulationOptions e;
    e.links_may_change = may_change;
    e.linger = 0ms;
    return std::make_unique<EmulatedTransport>(std::make_unique<ZmqTransport>(o), e);
  };
  auto a = make("a", true);
  auto b = make("b", false);
  CHECK(a->emulates_links());  // a delay line, although no link is slow yet
  CHECK_THROWS_AS(b->set_own_link(parse_link_spec("1gbit,1ms")), std::logic_error);
  a->connect("b", b->address());
  b->connect("a", a->address());
  const auto one_way = [&](std::uint64_t step) {
    const auto sent = Clock::now();
    a->send("b", step_header(MessageType::params_pull, step));
    auto m = b->receive(sent + 10s);
    REQUIRE(m);
    CHECK(m->header().step == step);
    return Clock::now() - sent;
  };
  one_way(0);  // the connection is up
  // Unemulated, a message over loopback takes well under a millisecond; the bound leaves
  // room for a busy machine, below the 300 ms the slow link holds each message.
  CHECK(one_way(1) < 250ms);
  a->set_own_link(parse_link_spec("unlimited,300ms"));
  CHECK(one_way(2) >= 300ms);     // the emulated delay is a lower bound
  a->set_own_link(std::nullopt);  // healed: its own link again
  CHECK(one_way(3) < 250ms);
  a.reset();
  b.reset();
}
