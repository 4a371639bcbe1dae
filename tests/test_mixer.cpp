// Mixer: the communication thread's results reach the parameters between local steps,
// exactly without overlap, one round late (as a delta that keeps local steps) with it;
// failures surface on the training thread.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <vector>

#include "gossip/mixing/algorithms/mixer.hpp"
#include "gossip/network/transport/inproc_transport.hpp"

namespace hearsay::algorithms {
namespace {

// An algorithm with a known effect: round r maps x to x/2 + r. Round `fail_round`
// throws a PeerError instead; serve() drains the inbox and adds `serve_bump` to
// element 0 for the first message it answers, as a partner averaging with us between
// rounds would change our values.
class ScriptedAlgorithm final : public Algorithm {
 public:
  ScriptedAlgorithm(transport::Transport& t, AlgorithmOptions options, bool serves)
      : Algorithm(t, PeerSet{{t.id()}, 0}, options), serves_(serves) {}
  std::string_view name() const override { return "scripted"; }
  RoundResult mix(std::span<float> params, std::uint64_t round) override {
    rounds_seen.push_back(round);
    peers_seen.push_back(peers().size());
    if (round == fail_round)
      throw transport::PeerError(transport::PeerFailure::disconnected, "peer-7", "tcp://x:1", "scripted");
    for (float& v : params) v = v / 2 + static_cast<float>(round);
    return {1, 0, 0};
  }
  void serve(std::span<float> params, Clock::time_point) override {
    while (transport().receive(Clock::now())) {  // answers whatever is queued
      if (!bumped_.exchange(true)) params[0] += serve_bump;
      served.fetch_add(1);
    }
  }
  bool serves_between_rounds() const noexcept override { return serves_; }
  // Answers from `round_wanted` in turn (true once they run out).
  bool round_needed() override {
    if (asked_ >= round_wanted.size()) return true;
    return round_wanted[asked_++];
  }

  // Takes any set (as gossip does), unless refuse_peers.
  void set_peers(PeerSet peers) override {
    if (refuse_peers) throw std::invalid_argument("scripted: this set is refused");
    peers_ = std::move(peers);
  }

  std::vector<std::uint64_t> rounds_seen;
  std::vector<int> peers_seen;  // peers().size() in each round
  std::atomic<bool> refuse_peers{false};
  std::vector<bool> round_wanted;
  std::uint64_t fail_round = ~std::uint64_t{0};
  float serve_bump = 0;
  std::atomic<int> served{0};  // messages serve() has answered

 private:
  bool serves_;
  std::size_t asked_ = 0;
  std::atomic<bool> bumped_{false};
};

struct Fixture {
  std::shared_ptr<transport::InprocFabric> fabric = transport::InprocFabric::create();
  transport::InprocTransport endpoint{fabric, {"self", {"run", "fp"}}};
  transport::InprocTransport partner{fabric, {"partner", {"run", "fp"}}};

  // A partner's request to self, which wakes the communication thread; returns once
  // `algorithm` has served it. serve() runs on that thread under the mixer's lock, so
  // the next call that takes the lock (after_step, flush) sees its change.
  void serve_partner_request(ScriptedAlgorithm& algorithm) {
    partner.connect("self", endpoint.address());
    wire::Header request;
    request.type = wire::MessageType::params_pull;
    const int before = algorithm.served.load();
    partner.send("self", request);
    const auto give_up = Clock::now() + std::chrono::seconds(20);
    while (algorithm.served.load() == before && Clock::now() < give_up) std::this_thread::yield();
    REQUIRE(algorithm.served.load() == before + 1);
  }
};

std::vector<float> mixed(std::vector<float> x, std::uint64_t round) {
  for (float& v : x) v = v / 2 + static_cast<float>(round);
  return x;
}

}  // namespace

TEST_CASE("mixer without overlap applies each round exactly, every H steps", "[mixer]") {
  Fixture f;
  AlgorithmOptions options;
  options.gossip_every = 3;
  auto owned = std::make_unique<ScriptedAlgorithm>(f.endpoint, options, false);
  auto* algo = owned.get();
  Mixer mixer(std::move(owned), 4);
  std::vector<float> params{1, 2, 3, 4};
  std::uint64_t round = 0;
  for (std::uint64_t step = 1; step <= 9; ++step) {
    const std::vector<float> before = params;
    mixer.after_step(params, step);
    if (step % 3 == 0) {
      CHECK(params == mixed(before, round));
      ++round;
    } else {
      CHECK(params == before);
    }
    for (float& v : params) v += 1;  // the next local step
  }
  CHECK(algo->rounds_seen == std::vector<std::uint64_t>{0, 1, 2});
  CHECK(mixer.stats().rounds == 3);
}

TEST_CASE("mixer with overlap applies a round one round late and keeps the local steps", "[mixer]") {
  Fixture f;
  AlgorithmOptions options;
  options.gossip_every = 1;
  options.overlap = true;
  Mixer mixer(std::make_unique<ScriptedAlgorithm>(f.endpoint, options, false), 3);
  std::vector<float> params{8, 16, 32};

  const std::vector<float> sent0 = params;
  mixer.after_step(params, 1);  // hands round 0 over, returns at once
  CHECK(params == sent0);
  for (float& v : params) v += 1;  // a local step while round 0 runs
  const std::vector<float> local = params;

  mixer.after_step(params, 2);  // applies round 0's change, hands round 1 over
  const std::vector<float> round0 = mixed(sent0, 0);
  for (std::size_t i = 0; i < params.size(); ++i) CHECK(params[i] == local[i] + (round0[i] - sent0[i]));

  const std::vector<float> sent1 = params;
  mixer.flush(params);
  const std::vector<float> round1 = mixed(sent1, 1);
  CHECK(params == round1);
}

TEST_CASE("mixer rethrows a round's failure on the training thread and goes on", "[mixer]") {
  Fixture f;
  AlgorithmOptions options;
  auto owned = std::make_unique<ScriptedAlgorithm>(f.endpoint, options, false);
  owned->fail_round = 1;
  Mixer mixer(std::move(owned), 2);
  std::vector<float> params{2, 4};
  mixer.after_step(params, 1);
  CHECK(params == mixed({2, 4}, 0));
  const std::vector<float> before = params;
  try {
    mixer.after_step(params, 2);
    FAIL("the failed round was not reported");
  } catch (const transport::PeerError& e) {
    CHECK(e.peer_id() == "peer-7");
  }
  CHECK(params == before);  // a failed round changes nothing
  mixer.after_step(params, 3);
  CHECK(params == mixed(before, 2));
}

TEST_CASE("mixer brings changes made while serving partners into the parameters", "[mixer]") {
  Fixture f;
  AlgorithmOptions options;
  options.gossip_every = 1000;  // no round of our own in this test
  auto owned = std::make_unique<ScriptedAlgorithm>(f.endpoint, options, true);
  owned->serve_bump = 5;
  ScriptedAlgorithm& algorithm = *owned;
  Mixer mixer(std::move(owned), 2);
  std::vector<float> params{1, 1};
  mixer.flush(params);  // first sync: the communication thread starts from these values
  mixer.flush(params);
  CHECK(params == std::vector<float>{1, 1});  // nothing arrived: nothing served

  // A partner's request wakes the communication thread, which serves it between rounds.
  f.serve_partner_request(algorithm);
  mixer.flush(params);
  CHECK(params == std::vector<float>{6, 1});
  mixer.flush(params);
  CHECK(params == std::vector<float>{6, 1});  // applied once, not again
}

TEST_CASE("mixer scales the local steps by the shard share, and nothing else", "[mixer]") {
  Fixture f;
  SECTION("without overlap: the steps since the last round, before the round mixes") {
    AlgorithmOptions options;
    options.gossip_every = 2;
    options.shard_share = 0.5;
    Mixer mixer(std::make_unique<ScriptedAlgorithm>(f.endpoint, options, false), 2);
    std::vector<float> params{4, 8};
    mixer.flush(params);  // the mixer starts from here
    for (float& v : params) v += 1;
    mixer.after_step(params, 1);  // not a round step: nothing changes yet
    CHECK(params == std::vector<float>{5, 9});
    for (float& v : params) v += 1;
    mixer.after_step(params, 2);  // two steps of 1, scaled to 1 in all, then round 0
    CHECK(params == mixed({5, 9}, 0));
    const std::vector<float> base = params;
    for (float& v : params) v += 3;
    mixer.after_step(params, 3);
    for (float& v : params) v += 1;
    mixer.after_step(params, 4);  // 4 scaled to 2, then round 1
    CHECK(params == mixed({base[0] + 2, base[1] + 2}, 1));
  }
  SECTION("with overlap: the steps taken while the round ran, its change whole") {
    AlgorithmOptions options;
    options.overlap = true;
    options.shard_share = 2;
    Mixer mixer(std::make_unique<ScriptedAlgorithm>(f.endpoint, options, false), 2);
    std::vector<float> params{8, 16};
    mixer.after_step(params, 1);  // hands round 0 over
    for (float& v : params) v += 1;
    mixer.after_step(params, 2);  // round 0's result, plus the step scaled to 2
    const std::vector<float> round0 = mixed({8, 16}, 0);
    CHECK(params == std::vector<float>{round0[0] + 2, round0[1] + 2});
    mixer.flush(params);
  }
  SECTION("a partner's averaging between rounds is not a local step") {
    AlgorithmOptions options;
    options.gossip_every = 1000;
    options.shard_share = 0.25;
    auto owned = std::make_unique<ScriptedAlgorithm>(f.endpoint, options, true);
    owned->serve_bump = 5;
    ScriptedAlgorithm& algorithm = *owned;
    Mixer mixer(std::move(owned), 2);
    std::vector<float> params{1, 1};
    mixer.flush(params);
    f.serve_partner_request(algorithm);
    params[1] += 4;  // a local step meanwhile
    mixer.flush(params);
    CHECK(params == std::vector<float>{6, 2});  // the partner's 5 whole, the step's 4 scaled to 1
  }
}

TEST_CASE("mixer refuses a shard share that is not positive and finite", "[mixer]") {
  Fixture f;
  for (double share : {0.0, -1.0, std::numeric_limits<double>::infinity()}) {
    AlgorithmOptions options;
    options.shard_share = share;
    CHECK_THROWS_WITH(Mixer(std::make_unique<ScriptedAlgorithm>(f.endpoint, options, false), 2),
                      Catch::Matchers::Contains("shard share"));
  }
}

TEST_CASE("mixer skips the rounds the algorithm declines and still syncs at those steps", "[mixer]") {
  Fixture f;
  AlgorithmOptions options;
  options.gossip_every = 1;
  auto owned = std::make_unique<ScriptedAlgorithm>(f.endpoint, options, true);
  owned->round_wanted = {true, false, false, true};
  owned->serve_bump = 5;
  ScriptedAlgorithm& algorithm = *owned;
  Mixer mixer(std::move(owned), 2);
  std::vector<float> params{4, 8};

  mixer.after_step(params, 1);  // round 0 runs
  CHECK(params == mixed({4, 8}, 0));

  // A partner's request is served between rounds (element 0 moves by 5); the declined
  // round at step 2 still brings that change in.
  f.serve_partner_request(algorithm);
  std::vector<float> expected = params;
  expected[0] += 5;
  mixer.after_step(params, 2);
  CHECK(params == expected);
  mixer.after_step(params, 3);  // declined: nothing changes
  CHECK(params == expected);
  mixer.after_step(params, 4);  // runs, numbered 1: skipped rounds take no number
  CHECK(params == mixed(expected, 1));

  CHECK(algorithm.rounds_seen == std::vector<std::uint64_t>{0, 1});
  CHECK(mixer.stats().rounds == 2);
  CHECK(mixer.stats().rounds_skipped == 2);
}

TEST_CASE("mixer refuses a parameter buffer of the wrong size", "[mixer]") {
  Fixture f;
  Mixer mixer(std::make_unique<ScriptedAlgorithm>(f.endpoint, AlgorithmOptions{}, false), 3);
  std::vector<float> wrong(2);
  CHECK_THROWS_AS(mixer.after_step(wrong, 1), std::invalid_argument);
  CHECK_THROWS_AS(Mixer(nullptr, 3), std::invalid_argument);
}

namespace hearsay::algorithms {
namespace {

// Parameters the mixer cannot reach in place (a GPU's): it sees only the store's calls.
class RemoteStore final : public ParameterStore {
 public:
  explicit RemoteStore(std::vector<float> values) : remote(std::move(values)) {}
  std::size_t size() const override { return remote.size(); }
  void read(std::span<float> out) override {
    ++reads;
    std::copy(remote.begin(), remote.end(), out.begin());
  }
  void add_difference_and_read(std::span<const float> work, std::span<const float> base, float scale,
                               std::span<float> out) override {
    ++adds;
    HostParameterStore(remote).add_difference_and_read(work, base, scale, out);
  }
  void write(std::span<const float> values) override {
    ++writes;
    std::copy(values.begin(), values.end(), remote.begin());
  }
  std::vector<float> remote;
  int reads = 0, adds = 0, writes = 0;
};

}  // namespace

TEST_CASE("mixer mixes parameters it reaches only through a store, as it mixes a host span",
          "[mixer][device]") {
  // A shard share other than 1 scales the local steps in the same one call: a GPU's
  // parameters make the same trips whatever the share.
  for (const auto& [overlap, share] : {std::pair{false, 1.0}, {true, 1.0}, {false, 0.5}, {true, 1.5}}) {
    INFO("overlap " << overlap << ", shard share " << share);
    Fixture f_host, f_remote;
    AlgorithmOptions options;
    options.gossip_every = 2;
    options.overlap = overlap;
    options.shard_share = share;
    Mixer on_host(std::make_unique<ScriptedAlgorithm>(f_host.endpoint, options, false), 3);
    Mixer remote(std::make_unique<ScriptedAlgorithm>(f_remote.endpoint, options, false), 3);
    std::vector<float> params{8, 16, 32};
    RemoteStore store(params);
    for (std::uint64_t step = 1; step <= 7; ++step) {
      const int calls_before = store.reads + store.adds + store.writes;
      on_host.after_step(params, step);
      remote.after_step(store, step);
      CHECK(store.remote == params);
      // Only round steps reach the parameters: no transfer between them.
      if (step % 2 != 0) CHECK(store.reads + store.adds + store.writes == calls_before);
      for (float& v : params) v += 1;  // the next local step, on both
      for (float& v : store.remote) v += 1;
    }
    on_host.flush(params);
    remote.flush(store);
    CHECK(store.remote == params);
    CHECK(store.reads == 1);                   // the first sync; every later one adds the difference
    CHECK(store.writes == (overlap ? 0 : 3));  // without overlap a round's result replaces them
  }
}

}  // namespace hearsay::algorithms

namespace hearsay::algorithms {

TEST_CASE("mixer keeps its working copy in the buffers a store gives it", "[mixer][device]") {
  // A store that lends the mixer its buffers (as the GPU store lends pinned memory).
  class LendingStore final : public ParameterStore {
   public:
    std::vector<float> params{8, 16, 32}, lent = std::vector<float>(6, -1.0f);
    std::size_t size() const override { return params.size(); }
    void read(std::span<float> out) override { std::copy(params.begin(), params.end(), out.begin()); }
    void add_difference_and_read(std::span<const float> work, std::span<const float> base, float scale,
                                 std::span<float> out) override {
      HostParameterStore(params).add_difference_and_read(work, base, scale, out);
    }
    void write(std::span<const float> values) override {
      std::copy(values.begin(), values.end(), params.begin());
    }
    std::span<float> mixer_buffer(int which) override {
      return std::span(lent).subspan(which == 0 ? 0 : 3, 3);
    }
  } store;
  Fixture f;
  AlgorithmOptions options;
  options.gossip_every = 1;
  Mixer mixer(std::make_unique<ScriptedAlgorithm>(f.endpoint, options, false), 3, 0, &store);
  mixer.after_step(store, 1);  // round 0: x / 2 + 0, through the lent buffers
  CHECK(store.params == std::vector<float>{4, 8, 16});
  CHECK(store.lent == std::vector<float>{4, 8, 16, 4, 8, 16});  // work and base, both lent
}

}  // namespace hearsay::algorithms

TEST_CASE("mixer hands a new peer set to the algorithm before its next round, and goes on counting",
          "[mixer]") {
  Fixture f;
  AlgorithmOptions options;
  options.gossip_every = 1;
  const bool serves = GENERATE(false, true);  // idle on its lock, or waiting for partners' messages
  INFO("serves between rounds: " << serves);
  auto owned = std::make_unique<ScriptedAlgorithm>(f.endpoint, options, serves);
  auto* algo = owned.get();
  Mixer mixer(std::move(owned), 2);
  std::vector<float> params{1, 2};
  mixer.after_step(params, 1);
  mixer.set_peers(PeerSet{{"partner", "self"}, 1});
  mixer.after_step(params, 2);
  // A later set replaces one not handed over yet; none changes the round numbers.
  mixer.set_peers(PeerSet{{"a", "partner", "self"}, 2});
  mixer.set_peers(PeerSet{{"a", "b", "partner", "self"}, 3});
  mixer.after_step(params, 3);
  CHECK(algo->peers_seen == std::vector<int>{1, 2, 4});
  CHECK(algo->rounds_seen == std::vector<std::uint64_t>{0, 1, 2});
  CHECK(mixer.stats().rounds == 3);

  // A set the algorithm refuses fails on the training thread, as a round's failure does,
  // and the mixer goes on with the set it had.
  algo->refuse_peers = true;
  mixer.set_peers(PeerSet{{"self"}, 0});
  CHECK_THROWS_WITH(mixer.after_step(params, 4), Catch::Matchers::Contains("this set is refused"));
  mixer.after_step(params, 5);
  CHECK(algo->peers_seen.back() == 4);
  CHECK(mixer.stats().rounds == 4);
}

TEST_CASE("a stopped mixer runs no rounds and keeps its statistics", "[mixer]") {
  Fixture f;
  AlgorithmOptions options;
  options.gossip_every = 1;
  options.overlap = GENERATE(false, true);
  INFO("overlap: " << options.overlap);
  auto owned = std::make_unique<ScriptedAlgorithm>(f.endpoint, options, false);
  auto* algo = owned.get();
  Mixer mixer(std::move(owned), 2);
  std::vector<float> params{1, 2};
  mixer.after_step(params, 1);
  mixer.after_step(params, 2);
  mixer.flush(params);  // with overlap: the second round has run
  mixer.stop();
  mixer.stop();  // twice is once
  const std::vector<float> before = params;
  mixer.after_step(params, 3);  // syncs, starts nothing (and waits for nothing)
  mixer.flush(params);
  mixer.set_peers(PeerSet{{"partner", "self"}, 1});  // dropped
  CHECK(mixer.stats().rounds == 2);
  CHECK(algo->rounds_seen == std::vector<std::uint64_t>{0, 1});
  CHECK(algo->peers().size() == 1);
  CHECK(params == before);
}

}  // namespace hearsay::algorithms
