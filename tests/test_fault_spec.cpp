// The simulator's fault schedule (`hearsay sim --faults SPEC`): parse_faults reads the
// spec, check_faults checks it against the size of the run.
#include <catch2/catch.hpp>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/fault_spec.hpp"

using Catch::Matchers::Contains;
using hearsay::sim::check_faults;
using hearsay::sim::Fault;
using hearsay::sim::FaultTime;
using hearsay::sim::parse_faults;

namespace {

using Groups = std::vector<std::vector<int>>;

// The message of the std::invalid_argument that `call` throws; fails the test when it
// throws none.
template <class Call>
std::string refusal(Call&& call) {
  try {
    call();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  FAIL("accepted");
  return {};
}

Fault only_fault(std::string_view spec) {
  auto faults = parse_faults(spec);
  REQUIRE(faults.size() == 1);
  return faults.front();
}

constexpr auto kSeconds = FaultTime::Unit::seconds;
constexpr auto kEpochs = FaultTime::Unit::epochs;

}  // namespace

TEST_CASE("kill and restart faults parse their peer and time", "[fault-spec]") {
  const Fault kill = only_fault("kill:5@30s");
  CHECK(kill.kind == Fault::Kind::kill);
  CHECK(kill.text == "kill:5@30s");
  CHECK(kill.peer == 5);
  CHECK(kill.at == FaultTime{kSeconds, 30});
  const Fault restart = only_fault("restart:12@1.5ep");
  CHECK(restart.kind == Fault::Kind::restart);
  CHECK(restart.peer == 12);
  CHECK(restart.at == FaultTime{kEpochs, 1.5});
  CHECK(to_string(Fault::Kind::restart) == "restart");
}

TEST_CASE("slow faults parse their factor, from the start or from a time", "[fault-spec]") {
  const Fault from_start = only_fault("slow:2:3x");
  CHECK(from_start.kind == Fault::Kind::slow);
  CHECK(from_start.peer == 2);
  CHECK(from_start.slowdown == 3);
  CHECK(from_start.at == FaultTime{kSeconds, 0});
  const Fault later = only_fault("slow:0:1.5x@2ep");
  CHECK(later.peer == 0);
  CHECK(later.slowdown == 1.5);
  CHECK(later.at == FaultTime{kEpochs, 2});
  CHECK(only_fault("slow:7:1x").slowdown == 1);
}

TEST_CASE("link faults parse the peer's link with parse_link_spec", "[fault-spec]") {
  const Fault link = only_fault("link:3:1mbit,20ms,loss=0.05");
  CHECK(link.kind == Fault::Kind::link);
  CHECK(link.peer == 3);
  CHECK(link.link.bits_per_second == 1e6);
  CHECK(link.link.delay_seconds == Approx(0.020));
  CHECK(link.link.loss == Approx(0.05));
  CHECK(link.link == hearsay::emulation::parse_link_spec("1mbit,20ms,loss=0.05"));
  const Fault plain = only_fault("link:0:1gbit,1ms");
  CHECK(plain.link.bits_per_second == 1e9);
  CHECK(plain.link.loss == 0);
  CHECK_FALSE(plain.timed_link());  // the whole run: given to the peers at their start
  CHECK_FALSE(link.timed_link());
  // With a time: from T to the end, or from T until T2.
  const Fault late = only_fault("link:2:1mbit,20ms,dup=0.1@30s");
  CHECK(late.timed_link());
  CHECK(late.at == FaultTime{FaultTime::Unit::seconds, 30});
  CHECK(late.to_the_end);
  CHECK(late.link.dup == Approx(0.1));
  const Fault span = only_fault("link:2:1mbit,20ms@1ep..2.5ep");
  CHECK(span.timed_link());
  CHECK(span.at == FaultTime{FaultTime::Unit::epochs, 1});
  CHECK(span.until == FaultTime{FaultTime::Unit::epochs, 2.5});
  CHECK_FALSE(span.to_the_end);
}

TEST_CASE("partition faults parse their groups sorted and their span", "[fault-spec]") {
  const Fault halves = only_fault("partition:0-3|4-7@30s..60s");
  CHECK(halves.kind == Fault::Kind::partition);
  CHECK(halves.peer == -1);
  CHECK(halves.groups == Groups{{0, 1, 2, 3}, {4, 5, 6, 7}});
  CHECK(halves.at == FaultTime{kSeconds, 30});
  CHECK(halves.until == FaultTime{kSeconds, 60});
  const Fault mixed = only_fault("partition:4,0,2|5-7,1,3@1ep..2.5ep");
  CHECK(mixed.groups == Groups{{0, 2, 4}, {1, 3, 5, 6, 7}});
  CHECK(mixed.until == FaultTime{kEpochs, 2.5});
  // Three groups, and a single-rank range; ranks 6.. are the unlisted group.
  CHECK(only_fault("partition:0|1-1|2-5@0s..1s").groups == Groups{{0}, {1}, {2, 3, 4, 5}});
  // Seconds and epochs do not compare before the run, so this span is taken as written.
  const Fault units = only_fault("partition:0|1@90s..1ep");
  CHECK(units.at == FaultTime{kSeconds, 90});
  CHECK(units.until == FaultTime{kEpochs, 1});
}

TEST_CASE("fault times read ms, s and m as seconds and ep as epochs", "[fault-spec]") {
  CHECK(only_fault("kill:1@500ms").at.unit == kSeconds);
  CHECK(only_fault("kill:1@500ms").at.value == Approx(0.5));
  CHECK(only_fault("kill:1@30s").at == FaultTime{kSeconds, 30});
  CHECK(only_fault("kill:1@2m").at == FaultTime{kSeconds, 120});
  CHECK(only_fault("kill:1@1.5m").at == FaultTime{kSeconds, 90});
  CHECK(only_fault("kill:1@1.5ep").at == FaultTime{kEpochs, 1.5});
  CHECK(only_fault("kill:1@0ep").at == FaultTime{kEpochs, 0});
  CHECK(only_fault("kill:1@0.25s").at == FaultTime{kSeconds, 0.25});
}

TEST_CASE("fault times print in seconds or epochs", "[fault-spec]") {
  CHECK(to_string(FaultTime{kSeconds, 30}) == "30s");
  CHECK(to_string(FaultTime{kSeconds, 0.5}) == "0.5s");
  CHECK(to_string(FaultTime{kEpochs, 1.5}) == "1.5ep");
  CHECK(to_string(FaultTime{}) == "0s");
  CHECK(only_fault("kill:1@" + to_string(FaultTime{kEpochs, 2.25})).at == FaultTime{kEpochs, 2.25});
}

TEST_CASE("whitespace around fault tokens and empty entries are ignored", "[fault-spec]") {
  const auto faults = parse_faults(
      " ; kill : 5 @ 30s ;\n slow: 2 :3x @ 1ep;;\tlink:3: 1mbit, 20ms, loss=0.05 ;"
      " partition: 0 - 3 , 8 | 4-7 @ 30s .. 60s ; ");
  REQUIRE(faults.size() == 4);
  CHECK(faults[0].text == "kill : 5 @ 30s");
  CHECK(faults[0].peer == 5);
  CHECK(faults[0].at == FaultTime{kSeconds, 30});
  CHECK(faults[1].text == "slow: 2 :3x @ 1ep");
  CHECK(faults[1].slowdown == 3);
  CHECK(faults[1].at == FaultTime{kEpochs, 1});
  CHECK(faults[2].peer == 3);
  CHECK(faults[2].link.loss == Approx(0.05));
  CHECK(faults[3].groups == Groups{{0, 1, 2, 3, 8}, {4, 5, 6, 7}});
  CHECK(faults[3].until == FaultTime{kSeconds, 60});
}

TEST_CASE("an empty fault spec gives no faults", "[fault-spec]") {
  CHECK(parse_faults("").empty());
  CHECK(parse_faults("  \t\n").empty());
  CHECK(parse_faults(";; ; ").empty());
  CHECK(parse_faults("kill:1@1s;").size() == 1);
}

TEST_CASE("a refused fault names it, says what is wrong and shows the form", "[fault-spec]") {
  CHECK(refusal([] { parse_faults("kill:x@3s"); }) ==
        "fault 'kill:x@3s': PEER 'x' is not a rank; expected kill:PEER@T, e.g. kill:3@30s");
  // The bad fault of several is the one named.
  const std::string message = refusal([] { parse_faults("kill:1@1s; slow:2:3"); });
  CHECK_THAT(message, Contains("fault 'slow:2:3'"));
  CHECK_THAT(message, Contains("expected slow:PEER:Fx[@T], e.g. slow:2:3x"));
  CHECK_THAT(refusal([] { parse_faults("boom:1@1s"); }),
             Contains("unknown kind 'boom'") && Contains("partition:GROUP|GROUP@T..T2"));
}

TEST_CASE("bad fault specs are refused", "[fault-spec]") {
  struct Bad {
    const char* spec;
    const char* fault;   // the text the message must name
    const char* reason;  // and a part of what it says is wrong
  };
  const Bad bad[] = {
      {"explode:3@30s", "explode:3@30s", "unknown kind 'explode'"},
      {":3@30s", ":3@30s", "unknown kind ''"},
      {"kill", "kill", "nothing follows 'kill'"},
      {"kill:3", "kill:3", "the time @T is missing"},
      {"restart:3@", "restart:3@", "T is missing"},
      {"kill:@30s", "kill:@30s", "PEER is missing"},
      {"kill:-1@30s", "kill:-1@30s", "PEER '-1' is not a rank"},
      {"kill:1.5@30s", "kill:1.5@30s", "PEER '1.5' is not a rank"},
      {"kill:99999@30s", "kill:99999@30s", "above the largest rank"},
      {"kill:3@30", "kill:3@30", "T '30' is not a time"},
      {"kill:3@30h", "kill:3@30h", "T '30h' is not a time"},
      {"kill:3@ep", "kill:3@ep", "T 'ep' is not a time"},
      {"kill:3@-5s", "kill:3@-5s", "must be a finite time, 0 or later"},
      {"kill:3@nans", "kill:3@nans", "must be a finite time"},
      {"kill:3@infep", "kill:3@infep", "must be a finite time"},
      {"kill:3@30s junk", "kill:3@30s junk", "T '30s junk' is not a time"},
      {"kill:3@30s@40s", "kill:3@30s@40s", "is not a time"},
      {"kill:3:4@30s", "kill:3:4@30s", "PEER '3:4' is not a rank"},
      {"slow:2:0.5x", "slow:2:0.5x", "must be at least 1x"},
      {"slow:2:3", "slow:2:3", "needs an x"},
      {"slow:2:x", "slow:2:x", "not a number followed by x"},
      {"slow:2:nanx", "slow:2:nanx", "must be at least 1x"},
      {"slow:2", "slow:2", "the factor :Fx is missing"},
      {"slow:2:", "slow:2:", "the factor F is missing"},
      {"slow:2:3x@soon", "slow:2:3x@soon", "T 'soon' is not a time"},
      {"link:3:fast,20ms", "link:3:fast,20ms", "link 'fast,20ms'"},
      {"link:3", "link:3", "the link :RATE,DELAY is missing"},
      {"link:3:1mbit,20ms@", "link:3:1mbit,20ms@", "T is missing"},
      {"link:3:1mbit,20ms@2ep..1ep", "link:3:1mbit,20ms@2ep..1ep", "not after it starts"},
      {"partition:0-3|2-5@30s..60s", "partition:0-3|2-5@30s..60s",
       "rank 2 is in two groups, '0-3' and '2-5'"},
      {"partition:0,1,0|2@1s..2s", "partition:0,1,0|2@1s..2s", "rank 0 is listed twice"},
      {"partition:0-7@30s..60s", "partition:0-7@30s..60s", "single group"},
      {"partition:@30s..60s", "partition:@30s..60s", "the groups are missing"},
      {"partition:0-3||4-7@30s..60s", "partition:0-3||4-7@30s..60s", "a group is empty"},
      {"partition:0-3,|4-7@30s..60s", "partition:0-3,|4-7@30s..60s", "has an empty entry"},
      {"partition:3-0|4-7@30s..60s", "partition:3-0|4-7@30s..60s", "runs backwards"},
      {"partition:0-|4-7@30s..60s", "partition:0-|4-7@30s..60s", "needs a rank on both sides"},
      {"partition:0-3|4-x@30s..60s", "partition:0-3|4-x@30s..60s", "'x' is not a rank"},
      {"partition:0-3|4-7@60s..30s", "partition:0-3|4-7@60s..30s", "not after it starts"},
      {"partition:0-3|4-7@30s..30s", "partition:0-3|4-7@30s..30s", "not after it starts"},
      {"partition:0-3|4-7@2ep..1ep", "partition:0-3|4-7@2ep..1ep", "not after it starts"},
      {"partition:0-3|4-7@30s", "partition:0-3|4-7@30s", "is not a span T..T2"},
      {"partition:0-3|4-7", "partition:0-3|4-7", "the time @T..T2 is missing"},
      {"partition:0-3|4-7@30s..", "partition:0-3|4-7@30s..", "T2 is missing"},
      {"kill:1@1s; partition:0|1@1s..2s..3s", "partition:0|1@1s..2s..3s", "T2 '2s..3s' is not a time"},
  };
  for (const auto& [spec, fault, reason] : bad) {
    INFO(spec);
    const std::string message = refusal([spec = spec] { parse_faults(spec); });
    CHECK_THAT(message, Contains("fault '" + std::string(fault) + "': "));
    CHECK_THAT(message, Contains(reason));
    CHECK_THAT(message, Contains("; expected ") && Contains("e.g. "));
  }
}

TEST_CASE("a bad link in a link fault carries parse_link_spec's message", "[fault-spec]") {
  const std::string message = refusal([] { parse_faults("link:3:1mbit,20"); });
  CHECK_THAT(message, Contains("fault 'link:3:1mbit,20'"));
  CHECK_THAT(message, Contains("link '1mbit,20'"));
  CHECK_THAT(message, Contains("delay '20' needs a unit"));
  CHECK_THAT(message, Contains("expected link:PEER:RATE,DELAY[,loss=P][,dup=P][,reorder=P][@T[..T2]], e.g. "
                               "link:3:1mbit,20ms,loss=0.05"));
}

TEST_CASE("check_faults refuses ranks outside the run", "[fault-spec]") {
  for (const char* spec :
       {"kill:8@1s", "restart:8@1s", "slow:8:2x", "link:8:1gbit,1ms", "partition:0-3|4-8@1s..2s"}) {
    INFO(spec);
    const auto faults = parse_faults(spec);
    const std::string message = refusal([&] { check_faults(faults, 8); });
    CHECK_THAT(message, Contains("fault '" + std::string(spec) + "'"));
    CHECK_THAT(message, Contains("rank 8 is out of range"));
    CHECK_THAT(message, Contains("0..7"));
    CHECK_NOTHROW(check_faults(faults, 9));
  }
  CHECK_THROWS_AS(check_faults({}, 0), std::invalid_argument);
}

TEST_CASE("check_faults refuses a second slow or link fault for one peer", "[fault-spec]") {
  const auto slow = parse_faults("slow:2:3x; kill:2@1s; slow:2:4x@10s");
  const std::string slow_message = refusal([&] { check_faults(slow, 4); });
  CHECK_THAT(slow_message, Contains("fault 'slow:2:4x@10s'"));
  CHECK_THAT(slow_message, Contains("peer 2 already has a slow fault, 'slow:2:3x'"));
  const auto link = parse_faults("link:3:1mbit,20ms; link:3:1gbit,1ms");
  CHECK_THAT(
      refusal([&] { check_faults(link, 4); }),
      Contains("fault 'link:3:1gbit,1ms'") && Contains("already has a link fault, 'link:3:1mbit,20ms'"));
  // One of each per peer, and the same kind for different peers, are fine.
  CHECK_NOTHROW(check_faults(parse_faults("slow:2:3x; link:2:1mbit,1ms; slow:3:2x; link:3:1gbit,1ms"), 4));
}

TEST_CASE("check_faults accepts repeated kills and restarts of one peer", "[fault-spec]") {
  CHECK_NOTHROW(check_faults(
      parse_faults("kill:1@30s; kill:1@30s; restart:1@30s; restart:1@30s; kill:1@1ep; restart:1@2ep"), 2));
}

TEST_CASE("check_faults refuses partitions that overlap in time", "[fault-spec]") {
  const std::string message =
      refusal([] { check_faults(parse_faults("partition:0-3|4-7@30s..60s; partition:0|1@45s..90s"), 8); });
  CHECK_THAT(message, Contains("fault 'partition:0|1@45s..90s'"));
  CHECK_THAT(message, Contains("overlaps partition 'partition:0-3|4-7@30s..60s'"));
  // Written in either order; known as soon as one starts within the other in its unit.
  CHECK_THROWS_AS(check_faults(parse_faults("partition:0|1@45s..50s; partition:0-3|4-7@30s..60s"), 8),
                  std::invalid_argument);
  CHECK_THROWS_AS(check_faults(parse_faults("partition:0-3|4-7@30s..60s; partition:0|1@40s..2ep"), 8),
                  std::invalid_argument);
  CHECK_THROWS_AS(check_faults(parse_faults("partition:0|1@1ep..2ep; partition:2|3@1.5ep..3ep"), 8),
                  std::invalid_argument);
  // One may start as the other ends, and seconds and epochs cannot be compared before the run.
  CHECK_NOTHROW(check_faults(parse_faults("partition:0-3|4-7@30s..60s; partition:0|1@60s..90s"), 8));
  CHECK_NOTHROW(check_faults(parse_faults("partition:0-3|4-7@30s..60s; partition:0|1@1ep..2ep"), 8));
}

TEST_CASE("check_faults accepts a full valid schedule", "[fault-spec]") {
  const auto faults = parse_faults(
      "slow:2:3x; kill:5@1.5ep; restart:5@2ep; link:3:1mbit,20ms,loss=0.05; partition:0-3|4-7@30s..60s");
  REQUIRE(faults.size() == 5);
  CHECK(faults[0].kind == Fault::Kind::slow);
  CHECK(faults[1].kind == Fault::Kind::kill);
  CHECK(faults[2].kind == Fault::Kind::restart);
  CHECK(faults[3].kind == Fault::Kind::link);
  CHECK(faults[4].kind == Fault::Kind::partition);
  CHECK(faults[4].text == "partition:0-3|4-7@30s..60s");
  CHECK_NOTHROW(check_faults(faults, 8));
  // The same schedule on fewer peers names ranks the run does not have.
  CHECK_THAT(refusal([&] { check_faults(faults, 5); }), Contains("fault 'kill:5@1.5ep'") && Contains("0..4"));
}

TEST_CASE("freeze faults parse their peer and span, and refuse what is not one", "[fault-spec]") {
  const Fault freeze = only_fault("freeze:2@30s..50s");
  CHECK(freeze.kind == Fault::Kind::freeze);
  CHECK(freeze.peer == 2);
  CHECK(freeze.at == FaultTime{kSeconds, 30});
  CHECK(freeze.until == FaultTime{kSeconds, 50});
  CHECK(to_string(Fault::Kind::freeze) == "freeze");
  const Fault in_epochs = only_fault(" freeze : 7 @ 1.2ep .. 1.5ep ");
  CHECK(in_epochs.peer == 7);
  CHECK(in_epochs.until == FaultTime{kEpochs, 1.5});
  CHECK_THAT(refusal([] { parse_faults("freeze:2@30s"); }),
             Contains("is not a span T..T2") && Contains("freeze:PEER@T..T2, e.g."));
  CHECK_THAT(refusal([] { parse_faults("freeze:2"); }), Contains("the time @T..T2 is missing"));
  CHECK_THAT(refusal([] { parse_faults("freeze:x@1s..2s"); }), Contains("PEER 'x' is not a rank"));
  CHECK_THAT(refusal([] { parse_faults("freeze:1@5s..5s"); }), Contains("not after it starts"));
}

TEST_CASE("two freezes of one peer may not overlap, of two peers they may", "[fault-spec]") {
  CHECK_NOTHROW(check_faults(parse_faults("freeze:1@10s..20s;freeze:2@15s..25s;freeze:1@20s..30s"), 4));
  CHECK_THAT(refusal([] { check_faults(parse_faults("freeze:1@10s..20s;freeze:1@15s..25s"), 4); }),
             Contains("'freeze:1@15s..25s'") && Contains("overlaps freeze 'freeze:1@10s..20s'"));
  CHECK_THAT(refusal([] { check_faults(parse_faults("freeze:4@1s..2s"), 4); }),
             Contains("rank 4 is out of range"));
}

TEST_CASE("disk-full faults parse a span, or a start that lasts to the end", "[fault-spec]") {
  const Fault span = only_fault("disk-full:1@1ep..2ep");
  CHECK(span.kind == Fault::Kind::disk_full);
  CHECK(span.peer == 1);
  CHECK(span.until == FaultTime{kEpochs, 2});
  CHECK_FALSE(span.to_the_end);
  CHECK(to_string(Fault::Kind::disk_full) == "disk-full");
  const Fault open = only_fault("disk-full:3@30s");
  CHECK(open.at == FaultTime{kSeconds, 30});
  CHECK(open.to_the_end);
  CHECK_THAT(refusal([] { parse_faults("disk-full:1"); }),
             Contains("the time @T is missing") && Contains("disk-full:PEER@T[..T2]"));
  CHECK_THAT(refusal([] { parse_faults("disk-full:1@2ep..1ep"); }), Contains("not after it starts"));
  CHECK_THAT(refusal([] { check_faults(parse_faults("disk-full:1@10s;disk-full:1@20s..30s"), 4); }),
             Contains("overlaps disk-full 'disk-full:1@10s'"));
  CHECK_NOTHROW(check_faults(parse_faults("disk-full:1@10s..20s;freeze:1@15s..25s;disk-full:2@10s"), 4));
}
