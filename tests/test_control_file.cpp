// The peer's control file (--control-file): its format, and the watcher that applies a
// rewrite while the peer runs.
#include <catch2/catch.hpp>
#include <condition_variable>
#include <mutex>

#include "base/atomic_file.hpp"
#include "gossip/network/emulation/compute_emulation.hpp"
#include "gossip/network/emulation/control_file.hpp"
#include "test_support.hpp"

using namespace hearsay;
using namespace hearsay::emulation;
using Catch::Matchers::Contains;
using hearsay::testing::TempPath;

TEST_CASE("control file: settings parse, round-trip and bad lines say which", "[control-file]") {
  CHECK(parse_peer_control("") == PeerControl{});
  const auto c = parse_peer_control("# written by hearsay sim\nblocked rank2 rank3\n\nslowdown 2.5\n");
  CHECK(c.blocked == std::vector<std::string>{"rank2", "rank3"});
  REQUIRE(c.slowdown);
  CHECK(*c.slowdown == 2.5);
  CHECK(parse_peer_control(to_text(c)) == c);
  CHECK(parse_peer_control("blocked\n").blocked.empty());
  CHECK(parse_peer_control(to_text(PeerControl{})) == PeerControl{});
  CHECK(parse_peer_control("hold # until the simulator starts everyone\n").hold);
  CHECK_FALSE(parse_peer_control("blocked\n").hold);
  PeerControl held;
  held.hold = true;
  CHECK(parse_peer_control(to_text(held)) == held);
  CHECK_THROWS_WITH(parse_peer_control("hold 3"), Contains("nothing after"));
  const auto paused = parse_peer_control("hold\npause-at 47\n");
  CHECK(paused.pause_at == 47);
  CHECK(parse_peer_control(to_text(paused)) == paused);
  CHECK_FALSE(parse_peer_control("hold\n").pause_at);
  for (const char* bad :
       {"pause-at", "pause-at 0", "pause-at -3", "pause-at 4.5", "pause-at 3 4", "pause-at x"})
    CHECK_THROWS_WITH(parse_peer_control(bad), Contains("line 1") && Contains("one step number"));
  CHECK_THROWS_WITH(parse_peer_control("pause-at 3\npause-at 4"), Contains("second 'pause-at'"));

  CHECK_THROWS_WITH(parse_peer_control("blocked a\nslow 3\n"), Contains("line 2") && Contains("'slow'"));
  CHECK_THROWS_WITH(parse_peer_control("slowdown 0.5"), Contains("[1, 1000]"));
  CHECK_THROWS_WITH(parse_peer_control("slowdown 3x"), Contains("line 1"));
  CHECK_THROWS_WITH(parse_peer_control("slowdown 2 3"), Contains("one number"));
  CHECK_THROWS_WITH(parse_peer_control("blocked a\nblocked b"), Contains("second 'blocked'"));

  // A link fault with a time: the peer's own link from now on.
  const auto linked = parse_peer_control("blocked\nlink 1mbit,20ms,loss=0.05,dup=0.1\n");
  REQUIRE(linked.link);
  CHECK(*linked.link == hearsay::emulation::parse_link_spec("1mbit,20ms,loss=0.05,dup=0.1"));
  CHECK(parse_peer_control(to_text(linked)) == linked);
  CHECK_FALSE(parse_peer_control("blocked\n").link);
  CHECK_THROWS_WITH(parse_peer_control("link"), Contains("line 1") && Contains("one link"));
  CHECK_THROWS_WITH(parse_peer_control("link 1mbit,20ms 3"), Contains("one link"));
  CHECK_THROWS_WITH(parse_peer_control("link fast,20ms"), Contains("line 1") && Contains("link 'fast,20ms'"));
  CHECK_THROWS_WITH(parse_peer_control("link 1mbit,1ms\nlink 1mbit,2ms"), Contains("second 'link'"));
}

namespace {

// Records what the watcher reports, and lets the test wait for the next report.
struct Reports {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<PeerControl> controls;
  std::vector<std::string> errors;

  // Waits until `pred` holds of the reports (up to 5 s, far above the 50 ms poll).
  template <typename Pred>
  bool wait(Pred pred) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, std::chrono::seconds(5), [&] { return pred(*this); });
  }
};

}  // namespace

TEST_CASE("control file: the watcher applies every rewrite and keeps settings over a bad one",
          "[control-file]") {
  TempPath dir;
  std::filesystem::create_directories(dir.path());
  const auto path = dir.path() / "peer0.control";
  Reports reports;
  ControlFileWatcher watcher(
      path,
      [&](const PeerControl& c) {
        std::lock_guard lock(reports.mutex);
        reports.controls.push_back(c);
        reports.changed.notify_all();
      },
      [&](const std::string& why) {
        std::lock_guard lock(reports.mutex);
        reports.errors.push_back(why);
        reports.changed.notify_all();
      });
  {
    // A missing file is reported at once, before the constructor returns: nothing blocked.
    std::lock_guard lock(reports.mutex);
    REQUIRE(reports.controls.size() == 1);
    CHECK(reports.controls[0] == PeerControl{});
  }

  write_file_atomically(path, "blocked rank1\n");
  REQUIRE(reports.wait([](Reports& r) { return r.controls.size() == 2; }));
  CHECK(reports.controls[1].blocked == std::vector<std::string>{"rank1"});

  write_file_atomically(path, "blocked rank1\nslowdown fast\n");
  REQUIRE(reports.wait([](Reports& r) { return !r.errors.empty(); }));
  CHECK_THAT(reports.errors[0], Contains("peer0.control") && Contains("previous settings stay"));

  write_file_atomically(path, "blocked\nslowdown 3\n");
  REQUIRE(reports.wait([](Reports& r) { return r.controls.size() == 3; }));
  CHECK(reports.controls[2].blocked.empty());
  CHECK(reports.controls[2].slowdown == 3.0);
}

TEST_CASE("emulated compute: the wait pads a step to --min-step-time, then --slowdown multiplies it",
          "[control-file]") {
  using std::chrono::milliseconds;
  using std::chrono::nanoseconds;
  const nanoseconds none{0};
  CHECK(emulated_compute_wait(milliseconds(10), none, 1.0) == none);              // a normal machine
  CHECK(emulated_compute_wait(milliseconds(10), none, 3.0) == milliseconds(20));  // 3x: 30 ms in all
  CHECK(emulated_compute_wait(milliseconds(10), milliseconds(60), 1.0) == milliseconds(50));
  CHECK(emulated_compute_wait(milliseconds(10), milliseconds(60), 3.0) == milliseconds(170));  // 180 in all
  // A computation already longer than the floor is not padded, only slowed.
  CHECK(emulated_compute_wait(milliseconds(80), milliseconds(60), 1.0) == none);
  CHECK(emulated_compute_wait(milliseconds(80), milliseconds(60), 2.0) == milliseconds(80));
  // A factor below 1 cannot make a machine faster than it is: no negative wait.
  CHECK(emulated_compute_wait(milliseconds(10), none, 0.5) == none);
}
