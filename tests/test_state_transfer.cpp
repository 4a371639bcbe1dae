// Pulling the training state of several peers at once (pull_states, as the simulator
// does at every evaluation point of an asynchronous run): answers in the order asked, a
// silent peer costs one shared deadline, and a peer whose loss the transport reported
// before the call costs nothing.
#include <catch2/catch.hpp>
#include <memory>
#include <vector>

#include "base/log.hpp"
#include "gossip/network/transport/zmq_transport.hpp"
#include "peer/state_transfer.hpp"
#include "transport_test_util.hpp"

using namespace hearsay;
using namespace hearsay::transport;
using namespace hearsay::transport::testing;
using namespace std::chrono_literals;

namespace {

// A peer over tcp whose state is three parameters equal to its number and one optimizer
// value, answered by a StateResponder unless `answers` is false.
struct StatePeer {
  StatePeer(const std::string& id, float value, bool answers)
      : transport(std::make_unique<ZmqTransport>(zmq_options(id, Kind::tcp))) {
    if (answers)
      responder = std::make_unique<StateResponder>(*transport, [value] {
        return TrainingSnapshot{{value, value, value}, {-value}, static_cast<std::uint64_t>(value) * 10};
      });
  }
  std::unique_ptr<Transport> transport;
  std::unique_ptr<StateResponder> responder;  // destroyed first (declared last)
};

}  // namespace

TEST_CASE("pull_states: answers in the order asked, a silent peer costs one deadline for all", "[state]") {
  logging::CapturedLines quiet(logging::Level::off);
  ZmqTransport observer(zmq_options("observer", Kind::tcp));
  StatePeer a("a", 1, true), silent("s", 2, false), b("b", 3, true);
  for (const StatePeer* p : {&a, &silent, &b}) observer.connect(p->transport->id(), p->transport->address());

  const std::vector<std::string> ask{"b", "s", "a"};
  const auto start = Clock::now();
  const auto got = pull_states(observer, ask, 3, 600ms);
  const double took = seconds_since(start);
  REQUIRE(got.size() == 2);
  CHECK(got[0].from == "b");
  CHECK(got[0].state.params == std::vector<float>{3, 3, 3});
  CHECK(got[0].state.optimizer_state == std::vector<float>{-3});
  CHECK(got[0].state.step == 30);
  CHECK(got[1].from == "a");
  CHECK(got[1].state.params == std::vector<float>{1, 1, 1});
  // The silent peer is waited for up to the deadline, once: asked one after the other
  // with a timeout each, b and a would have come after it.
  CHECK(took >= 0.55);
  CHECK(took < 1.5);

  // A state of another shape is left out; nothing else is lost.
  const auto wrong_shape = pull_states(observer, std::vector<std::string>{"a", "b"}, 4, 2s);
  CHECK(wrong_shape.empty());
  // The answers of the call before (late ones included) are not taken for this one's.
  const auto again = pull_states(observer, std::vector<std::string>{"a"}, 3, 2s);
  REQUIRE(again.size() == 1);
  CHECK(again[0].from == "a");
}

TEST_CASE("pull_states: a peer reported gone before the call is not waited for", "[state]") {
  logging::CapturedLines quiet(logging::Level::off);
  ZmqTransport observer(zmq_options("observer", Kind::tcp));
  StatePeer a("a", 1, true);
  auto leaving = std::make_unique<StatePeer>("b", 3, true);
  observer.connect("a", a.transport->address());
  observer.connect("b", leaving->transport->address());
  // Both are reachable: a first pull gets both.
  REQUIRE(pull_states(observer, std::vector<std::string>{"a", "b"}, 3, 5s).size() == 2);

  // b's process ends; the observer's transport stores one error about it, which the next
  // send (to a, asked first) rethrows. b must not then be asked and waited for.
  leaving.reset();
  REQUIRE(observer.ready(Clock::now() + 10s));  // the stored error is waiting
  const auto start = Clock::now();
  const auto got = pull_states(observer, std::vector<std::string>{"a", "b"}, 3, 5s);
  const double took = seconds_since(start);
  REQUIRE(got.size() == 1);
  CHECK(got[0].from == "a");
  CHECK(took < 2.5);  // not the 5 s deadline
}
