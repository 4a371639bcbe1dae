// Which faults of a simulated run fired, and when (FaultLog): a fault that never came must
// not be reported as applied.
#include <catch2/catch.hpp>
#include <string>

#include "sim/fault_log.hpp"

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using hearsay::sim::FaultLog;
using hearsay::sim::parse_faults;

TEST_CASE("fault log: slow and link faults fire when their time comes, kills when delivered",
          "[sim-faults]") {
  FaultLog log(parse_faults("link:0:1mbit,20ms; slow:1:2x@0.5ep; kill:2@3s"));
  log.observe(0.0, 0.0);
  const auto& f = log.firings();
  REQUIRE(f.size() == 3);
  CHECK(f[0].fired);  // a link fault holds from the start
  CHECK(f[0].time_s == 0.0);
  CHECK(f[0].peer == 0);
  CHECK_FALSE(f[1].fired);
  log.observe(1.0, 0.49);
  CHECK_FALSE(f[1].fired);
  log.observe(1.2, 0.51);
  CHECK(f[1].fired);
  CHECK(f[1].time_s == 1.2);
  CHECK(f[1].run_epochs == 0.51);
  // Observing never fires a kill: only the simulator's delivery does.
  log.observe(5.0, 2.0);
  CHECK_FALSE(f[2].fired);
  CHECK(log.not_fired(5.0, 2.0) == "kill:2@3s never fired: the run ended at 5.0 s (2.00 epochs)");
  log.fired(2, 5.0, 2.0);
  log.fired(2, 6.0, 2.5);  // once: the first delivery counts
  CHECK(f[2].fired);
  CHECK(f[2].time_s == 5.0);
  CHECK(log.not_fired(6.0, 2.5).empty());
}

TEST_CASE("fault log: a partition fires while it holds and heals at its end", "[sim-faults]") {
  FaultLog log(parse_faults("partition:0|1@1s..2s; partition:0|1@0.5ep..0.6ep"));
  const auto& f = log.firings();
  log.observe(0.5, 0.1);
  CHECK_FALSE(f[0].fired);
  log.observe(1.1, 0.2);
  CHECK(f[0].fired);
  CHECK(f[0].peer == -1);
  CHECK_FALSE(f[0].healed_s);
  log.observe(2.3, 0.45);
  CHECK(f[0].healed_s == 2.3);
  // The second one's start and end both passed between two looks: no control file ever
  // cut a link, so it did not fire.
  log.observe(2.5, 0.7);
  CHECK_FALSE(f[1].fired);
  CHECK_THAT(log.not_fired(2.5, 0.7), StartsWith("partition:0|1@0.5ep..0.6ep never fired"));
}

TEST_CASE("fault log: several faults that never fired are all named", "[sim-faults]") {
  FaultLog log(parse_faults("kill:1@20s; restart:1@30s"));
  log.observe(12.34, 0.8);
  const std::string text = log.not_fired(12.34, 0.8);
  CHECK_THAT(text, StartsWith("kill:1@20s, restart:1@30s never fired"));
  CHECK_THAT(text, Contains("12.3 s (0.80 epochs)"));
  CHECK(FaultLog(parse_faults("")).not_fired(1, 1).empty());
}
