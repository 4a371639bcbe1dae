// Membership over the in-process fabric with short intervals: joining through a seed,
// suspicion and death of a killed peer, its return under the same id, bye, malformed
// member lists, and an unreachable seed. Every wait polls a condition until a generous
// deadline; nothing is timed.
#include <algorithm>
#include <catch2/catch.hpp>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/log.hpp"
#include "gossip/network/membership/membership.hpp"
#include "gossip/network/transport/inproc_transport.hpp"

using namespace hearsay;
using namespace hearsay::membership;
using namespace std::chrono_literals;
using transport::InprocFabric;
using transport::InprocOptions;
using transport::InprocTransport;

namespace {

const wire::Expectation kRun{"run-members", "mlp-members"};

// Polls cond until it holds or a deadline far beyond any expected wait passes.
bool eventually(const std::function<bool()>& cond, Clock::duration limit = 20s) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(5ms);  // polling interval, not synchronization
  }
  return cond();
}

MembershipOptions fast_options(std::vector<std::string> seeds) {
  MembershipOptions o;
  o.seeds = std::move(seeds);
  o.heartbeat = 20ms;
  o.suspect_after = 100ms;
  o.dead_after = 300ms;
  return o;
}

// One peer: its endpoint, its membership, and the changes it reported.
struct Peer {
  std::unique_ptr<InprocTransport> transport;
  std::unique_ptr<Membership> membership;
  mutable std::mutex events_mutex;
  std::vector<MemberEvent> events;

  std::vector<Change> changes_of(const std::string& id) const {
    std::lock_guard lock(events_mutex);
    std::vector<Change> out;
    for (const auto& e : events)
      if (e.id == id) out.push_back(e.change);
    return out;
  }
};

void start_peer(Peer& peer, const std::shared_ptr<InprocFabric>& fabric, const std::string& id,
                MembershipOptions options) {
  InprocOptions t;
  t.id = id;
  t.expect = kRun;
  peer.transport = std::make_unique<InprocTransport>(fabric, t);
  peer.membership = std::make_unique<Membership>(*peer.transport, std::move(options));
  {
    std::lock_guard lock(peer.events_mutex);
    peer.events.clear();
  }
  peer.membership->set_on_change([&peer](const MemberEvent& e) {
    std::lock_guard lock(peer.events_mutex);
    peer.events.push_back(e);
  });
  peer.membership->start();
}

// A run of n peers, p0 the seed of the others.
struct Cluster {
  std::shared_ptr<InprocFabric> fabric = InprocFabric::create();
  std::vector<std::unique_ptr<Peer>> peers;
  std::vector<std::string> ids;

  Clock::duration suspect_after, dead_after;

  explicit Cluster(int n, Clock::duration suspect = 100ms, Clock::duration dead = 300ms)
      : suspect_after(suspect), dead_after(dead) {
    for (int i = 0; i < n; ++i) {
      ids.push_back("p" + std::to_string(i));
      peers.push_back(std::make_unique<Peer>());
    }
    for (int i = 0; i < n; ++i) restart(i);
  }
  void restart(int i) {
    auto seeds = i == 0 ? std::vector<std::string>{} : std::vector{InprocFabric::address_for("p0")};
    auto options = fast_options(seeds);
    options.suspect_after = suspect_after;
    options.dead_after = dead_after;
    start_peer(*peers[i], fabric, ids[i], options);
  }
  Membership& at(int i) { return *peers[i]->membership; }
  // Whether every running peer but `except` sees id in state.
  bool all_see(const std::string& id, MemberState state, int except = -1) {
    for (int i = 0; i < static_cast<int>(peers.size()); ++i) {
      if (i == except || ids[i] == id) continue;
      if (at(i).state_of(id) != state) return false;
    }
    return true;
  }
  bool all_see_everyone() {
    for (auto& p : peers)
      if (p->membership->live_members() != ids) return false;
    return true;
  }
};

}  // namespace

TEST_CASE("four peers joining through one seed all see all four", "[membership]") {
  logging::CapturedLines lines(logging::Level::info);
  Cluster cluster(4);
  REQUIRE(eventually([&] { return cluster.all_see_everyone(); }));
  // Each peer's owner takes the changes (set_on_change) and reports them: membership adds no
  // info line of its own (every change was in a peer's log twice).
  for (const auto& line : lines.lines()) CHECK_FALSE(line.message.find("' joined") != std::string::npos);
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j)
      CHECK(cluster.at(i).address_of(cluster.ids[j]) == InprocFabric::address_for(cluster.ids[j]));
    // Three others joined. The version is raised as each change is published, just after
    // the member list shows it: wait for it rather than race it.
    CHECK(eventually([&] { return cluster.at(i).version() >= 3; }));
    CHECK(cluster.at(i).counters().malformed_entries == 0);
  }
  CHECK(cluster.at(0).counters().hellos >= 3);
  CHECK_FALSE(cluster.at(0).state_of("nobody").has_value());
}

TEST_CASE("a killed peer turns suspect then dead everywhere and is alive again once restarted",
          "[membership]") {
  logging::CapturedLines quiet(logging::Level::off);
  // Suspicion is seen only by a timeout check that runs between suspect_after and
  // dead_after of silence: a check that comes later (a membership thread held up that long
  // by a busy machine) turns the member dead at once. 900 ms apart rather than 200 ms, so
  // that only a stall of most of a second can skip the suspicion.
  Cluster cluster(4, 100ms, 1s);
  REQUIRE(eventually([&] { return cluster.all_see_everyone(); }));

  cluster.fabric->kill("p3");
  // dead_after is 1 s; the deadline only guards against a hang.
  REQUIRE(eventually([&] { return cluster.all_see("p3", MemberState::dead, 3); }, 10s));
  for (int i = 0; i < 3; ++i) {
    const auto changes = cluster.peers[i]->changes_of("p3");
    INFO("peer p" << i);
    auto suspected = std::find(changes.begin(), changes.end(), Change::suspected);
    auto died = std::find(changes.begin(), changes.end(), Change::died);
    REQUIRE(suspected != changes.end());
    REQUIRE(died != changes.end());
    CHECK(suspected < died);
  }
  // The survivors see each other alive. Eventually: with 100 ms to suspicion, a survivor
  // held up for five heartbeats by a busy machine is suspect until its next one comes.
  CHECK(eventually([&] {
    for (int i = 0; i < 3; ++i)
      if (cluster.at(i).live_members() != std::vector<std::string>{"p0", "p1", "p2"}) return false;
    return true;
  }));

  // The same id comes back in a new process: a new endpoint and a new incarnation.
  cluster.peers[3]->membership.reset();
  cluster.peers[3]->transport.reset();
  cluster.restart(3);
  REQUIRE(eventually([&] { return cluster.all_see_everyone(); }));
  for (int i = 0; i < 3; ++i) {
    const auto changes = cluster.peers[i]->changes_of("p3");
    CHECK(std::count(changes.begin(), changes.end(), Change::restarted) +
              std::count(changes.begin(), changes.end(), Change::revived) >=
          1);
  }
  CHECK(cluster.at(0).counters().restarts >= 1);
}

TEST_CASE("a peer that says bye is dead at once, without suspicion", "[membership]") {
  logging::CapturedLines quiet(logging::Level::off);
  // Silence alone would take a minute to make anyone suspect here, two to make it dead:
  // whatever makes p2 dead within the wait below is its bye, and no suspicion of it can
  // come from a busy machine holding up heartbeats for a second or two.
  Cluster cluster(4, 60s, 120s);
  REQUIRE(eventually([&] { return cluster.all_see_everyone(); }));

  cluster.at(2).leave();
  REQUIRE(eventually([&] { return cluster.all_see("p2", MemberState::dead, 2); }));
  for (int i : {0, 1, 3}) {
    INFO("peer p" << i);
    const auto changes = cluster.peers[i]->changes_of("p2");
    CHECK(std::count(changes.begin(), changes.end(), Change::left) == 1);
    CHECK(std::count(changes.begin(), changes.end(), Change::suspected) == 0);
    const auto all = cluster.at(i).members();
    auto it = std::find_if(all.begin(), all.end(), [](const MemberInfo& m) { return m.id == "p2"; });
    REQUIRE(it != all.end());
    CHECK(it->left);
    CHECK(cluster.at(i).live_members() == std::vector<std::string>{"p0", "p1", "p3"});
  }
}

TEST_CASE("a malformed member list is dropped and counted and leaves the list unchanged", "[membership]") {
  logging::CapturedLines quiet(logging::Level::off);
  Cluster cluster(2);
  REQUIRE(eventually([&] { return cluster.all_see_everyone(); }));
  const auto before = cluster.at(0).counters().malformed_entries;

  wire::Header h;
  h.type = wire::MessageType::members;
  h.run_id = kRun.run_id;
  h.fingerprint = kRun.fingerprint;
  h.sender = "p1";
  h.members = {"garbage",
               "1:2:=inproc-fabric:p9",                       // empty id
               "x:1:p9=inproc-fabric:p9",                     // incarnation not a number
               "01:1:p9=inproc-fabric:p9",                    // leading zero
               "1:99999999999999999999:p9=inproc-fabric:p9",  // heartbeat past uint64
               "1:1:p9=",                                     // empty address
               "1:1:p9=inproc\x01"
               "fabric",   // control character
               "1:1:p9"};  // no address at all
  cluster.fabric->inject("p0", "p1", {wire::encode_header(h)});
  REQUIRE(
      eventually([&] { return cluster.at(0).counters().malformed_entries >= before + h.members.size(); }));
  CHECK(cluster.at(0).counters().malformed_entries == before + h.members.size());
  CHECK_FALSE(cluster.at(0).state_of("p9").has_value());
  CHECK(cluster.at(0).live_members() == std::vector<std::string>{"p0", "p1"});
}

TEST_CASE("a bye from a member not heard of yet records it as one that left", "[membership]") {
  // A short run: p9 saw everyone, trained and said bye before news of it reached p0, which
  // then waited for it to join until its timeout.
  logging::CapturedLines quiet(logging::Level::off);
  Cluster cluster(2);
  REQUIRE(eventually([&] { return cluster.all_see_everyone(); }));
  wire::Header bye;
  bye.type = wire::MessageType::bye;
  bye.run_id = kRun.run_id;
  bye.fingerprint = kRun.fingerprint;
  bye.sender = "p9";
  bye.members = {"7:3:p9=inproc-fabric:p9"};
  cluster.fabric->inject("p0", "p9", {wire::encode_header(bye)});
  REQUIRE(eventually([&] { return cluster.at(0).state_of("p9").has_value(); }));
  CHECK(cluster.at(0).state_of("p9") == MemberState::dead);
  const auto all = cluster.at(0).members();
  const auto p9 = std::find_if(all.begin(), all.end(), [](const MemberInfo& m) { return m.id == "p9"; });
  REQUIRE(p9 != all.end());
  CHECK(p9->left);
  CHECK(p9->address == "inproc-fabric:p9");
  CHECK(cluster.at(0).live_members() == std::vector<std::string>{"p0", "p1"});
}

TEST_CASE("a seed that does not exist leaves the joiner alone with a warning, still retrying",
          "[membership]") {
  logging::CapturedLines lines(logging::Level::warn);
  auto fabric = InprocFabric::create();
  Peer lonely;
  auto options = fast_options({InprocFabric::address_for("nobody")});
  options.join_retry = 30ms;
  start_peer(lonely, fabric, "lonely", options);
  REQUIRE(eventually([&] { return lonely.membership->counters().seed_failures >= 3; }));
  CHECK(lonely.membership->counters().seed_attempts >= 3);
  CHECK(lonely.membership->live_members() == std::vector<std::string>{"lonely"});
  const auto captured = lines.lines();
  CHECK(std::any_of(captured.begin(), captured.end(), [](const auto& line) {
    return line.level == logging::Level::warn &&
           line.message.find("inproc-fabric:nobody") != std::string::npos &&
           line.message.find("unreachable") != std::string::npos;
  }));

  // Once the seed exists, the next retry finds it.
  Peer seed;
  start_peer(seed, fabric, "nobody", fast_options({}));
  REQUIRE(eventually([&] {
    return lonely.membership->live_members() == std::vector<std::string>{"lonely", "nobody"} &&
           seed.membership->live_members() == std::vector<std::string>{"lonely", "nobody"};
  }));
}

TEST_CASE("member entries round-trip and malformed ones are refused", "[membership]") {
  const Entry e{"peer-7", "tcp://10.0.0.5:41234#abc=def:x", 1700000000000000, 42};
  CHECK(encode_entry(e) == "1700000000000000:42:peer-7=tcp://10.0.0.5:41234#abc=def:x");
  CHECK(parse_entry(encode_entry(e)) == e);
  CHECK_FALSE(parse_entry("1:2:a=b=c").value().address.empty());
  CHECK_FALSE(parse_entry(":2:a=b"));
  CHECK_FALSE(parse_entry("1::a=b"));
  CHECK_FALSE(parse_entry("-1:2:a=b"));
  CHECK_FALSE(parse_entry("1:2:" + std::string(256, 'i') + "=b"));
  CHECK_FALSE(parse_entry("1:2:a=" + std::string(kMaxAddressBytes + 1, 'b')));
  const std::vector<std::string> texts{"1:1:a=x", "bad", "2:2:a=y", "1:1:b=z"};
  const auto parsed = parse_list(texts);
  CHECK(parsed.malformed == 2);  // "bad" and the second "a"
  REQUIRE(parsed.entries.size() == 2);
  CHECK(parsed.entries[0].address == "x");
  CHECK(parsed.entries[1].id == "b");
  // Encoding stops before the byte budget, but always keeps the first entry.
  std::vector<Entry> many(100, Entry{"", "inproc-fabric:x", 1, 1});
  for (std::size_t i = 0; i < many.size(); ++i) many[i].id = "peer" + std::to_string(i);
  CHECK(encode_list(many, 200).size() < many.size());
  CHECK(encode_list(many, 1).size() == 1);
}

TEST_CASE("membership refuses options that cannot work", "[membership]") {
  auto fabric = InprocFabric::create();
  InprocOptions t;
  t.id = "p";
  t.expect = kRun;
  InprocTransport transport(fabric, t);
  auto bad = fast_options({});
  bad.dead_after = bad.suspect_after;
  CHECK_THROWS_AS(Membership(transport, bad), std::invalid_argument);
  bad = fast_options({});
  bad.suspect_after = bad.heartbeat;
  CHECK_THROWS_AS(Membership(transport, bad), std::invalid_argument);
  Membership ok(transport, fast_options({}));
  ok.start();
  CHECK_THROWS_AS(ok.start(), std::logic_error);
  ok.stop();
  ok.stop();
}
