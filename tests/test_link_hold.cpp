// Link emulation held at the receiver (EmulationOptions::hold_at_receiver, Inbox's
// set_hold_until_due): the sender stamps each message with the moment its emulated link
// delivers it and sends it at once; the receiver's inbox keeps it out of sight until then.
// Here the inbox's side, the header field and what the simulator asks of its peers; the
// decorator's timing, loss and send queue in both modes are in test_emulated_transport.cpp.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <set>
#include <string>

#include "gossip/network/transport/inbox.hpp"
#include "gossip/network/wire/header.hpp"
#include "sim/fault_spec.hpp"
#include "sim/peer_setup.hpp"
#include "sim/sim_config.hpp"
#include "transport_test_util.hpp"

using namespace hearsay;
using namespace hearsay::transport;
using namespace hearsay::transport::testing;
using namespace std::chrono_literals;
using wire::MessageType;

namespace {

std::uint64_t due_in(Clock::duration d) { return due_ns_of(Clock::now() + d); }

// A message from `sender` with step `step`, due at `due_ns` (0: none).
Message message_from(const std::string& sender, std::uint64_t step, std::uint64_t due_ns) {
  wire::Header h = step_header(MessageType::params_pull, step);
  h.sender = sender;
  h.due_ns = due_ns;
  return Message(std::move(h), {}, nullptr);
}

}  // namespace

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
