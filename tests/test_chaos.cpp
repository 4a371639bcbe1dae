// --chaos SEED[:RATE]: the schedule it draws is reproducible, valid as a --faults spec,
// overlapping, and only holds faults that can fire.
#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <stdexcept>
#include <string>

#include "sim/chaos.hpp"
#include "sim/fault_spec.hpp"
#include "sim/sim_config.hpp"

using Catch::Matchers::Contains;
using namespace hearsay::sim;

namespace {

std::string refusal(const std::string& text) {
  try {
    parse_chaos(text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  FAIL("accepted: " << text);
  return {};
}

// When each peer is dead or frozen, from a parsed schedule (times in epochs).
struct Away {
  double from, to;
};

}  // namespace

TEST_CASE("chaos: SEED[:RATE] parses, and what is not one is refused with the form", "[chaos]") {
  CHECK(parse_chaos("7") == ChaosSpec{7, 2});
  CHECK(parse_chaos("7:3.5") == ChaosSpec{7, 3.5});
  CHECK(parse_chaos("0:0.5") == ChaosSpec{0, 0.5});
  CHECK_THAT(refusal("x"), Contains("SEED 'x' is not a non-negative integer") && Contains("SEED[:RATE]"));
  CHECK_THAT(refusal("-1"), Contains("SEED '-1'"));
  CHECK_THAT(refusal(""), Contains("SEED ''"));
  CHECK_THAT(refusal("7:"), Contains("RATE '' is not a number"));
  CHECK_THAT(refusal("7:fast"), Contains("RATE 'fast' is not a number"));
  CHECK_THAT(refusal("7:0"), Contains("must be above 0"));
  CHECK_THAT(refusal("7:1e9"), Contains("at most 100"));
  CHECK_THAT(refusal("7:nan"), Contains("must be above 0"));
}

TEST_CASE("chaos: the same seed draws the same schedule, another seed another", "[chaos]") {
  CHECK(chaos_faults({7, 2}, 8, 3) == chaos_faults({7, 2}, 8, 3));
  std::set<std::string> drawn;
  for (std::uint64_t seed = 0; seed < 20; ++seed) drawn.insert(chaos_faults({seed, 2}, 8, 3));
  CHECK(drawn.size() == 20);
  CHECK(chaos_faults({7, 2}, 8, 3) != chaos_faults({7, 2}, 16, 3));
}

TEST_CASE("chaos: every schedule is a valid --faults spec of overlapping faults that can all fire",
          "[chaos]") {
  std::map<Fault::Kind, int> kinds;
  int messy_links = 0;  // links that duplicate or reorder
  int timed_links = 0;  // links that turn bad, then heal
  for (const int peers : {2, 3, 4, 8, 32})
    for (const double epochs : {0.5, 1.0, 3.0})
      for (std::uint64_t seed = 0; seed < 40; ++seed) {
        const std::string spec = chaos_faults({seed, 2}, peers, epochs);
        INFO(peers << " peers, " << epochs << " epochs, seed " << seed << ": " << spec);
        const auto faults = parse_faults(spec);
        REQUIRE_NOTHROW(check_faults(faults, peers));
        // About RATE per epoch (a kill and its restart are drawn together: one more at most).
        CHECK(static_cast<double>(faults.size()) >= std::max(1.0, 2 * epochs) - 0.5);
        CHECK(static_cast<double>(faults.size()) <= 2 * epochs + 1.5);
        std::map<int, std::vector<Away>> away;
        int dead_at_most = 0;
        for (const Fault& f : faults) {
          ++kinds[f.kind];
          if (f.kind != Fault::Kind::link || f.timed_link()) {  // a whole-run link has no time
            CHECK(f.at.unit == FaultTime::Unit::epochs);
            CHECK(f.at.value <= 0.75 * epochs);  // every fault comes while the run still trains
          }
          // The last quarter is healthy: what ends (a restart ends a death) has ended by then.
          if (f.kind == Fault::Kind::restart) CHECK(f.at.value < 0.75 * epochs);
          if (f.kind == Fault::Kind::partition || f.kind == Fault::Kind::freeze ||
              f.kind == Fault::Kind::disk_full) {
            CHECK(f.until.value < 0.75 * epochs);
            CHECK_FALSE(f.to_the_end);
          }
          if (f.kind == Fault::Kind::link && (f.link.dup > 0 || f.link.reorder > 0)) ++messy_links;
          if (f.timed_link()) {
            ++timed_links;
            CHECK_FALSE(f.to_the_end);
            CHECK(f.until.value < 0.75 * epochs);
          }
          if (f.kind == Fault::Kind::kill) {
            CHECK(peers >= 3);  // two peers: killing one leaves nobody to mix with
            double back = epochs + 1;
            for (const Fault& r : faults)
              if (r.kind == Fault::Kind::restart && r.peer == f.peer && r.at.value > f.at.value)
                back = std::min(back, r.at.value);
            away[f.peer].push_back({f.at.value, back});
            int dead = 0;
            for (const Fault& g : faults)
              if (g.kind == Fault::Kind::kill && g.at.value <= f.at.value) {
                double g_back = epochs + 1;
                for (const Fault& r : faults)
                  if (r.kind == Fault::Kind::restart && r.peer == g.peer && r.at.value > g.at.value)
                    g_back = std::min(g_back, r.at.value);
                dead += f.at.value < g_back;
              }
            dead_at_most = std::max(dead_at_most, dead);
          }
          if (f.kind == Fault::Kind::freeze) away[f.peer].push_back({f.at.value, f.until.value});
        }
        CHECK(dead_at_most <= std::max(1, peers / 4));
        // No freeze or kill of a peer that is dead or frozen then: it would never fire.
        for (const auto& [peer, spans] : away)
          for (std::size_t i = 0; i < spans.size(); ++i)
            for (std::size_t j = i + 1; j < spans.size(); ++j)
              CHECK((spans[i].to <= spans[j].from || spans[j].to <= spans[i].from));
      }
  for (const auto kind : {Fault::Kind::kill, Fault::Kind::restart, Fault::Kind::slow, Fault::Kind::link,
                          Fault::Kind::partition, Fault::Kind::freeze, Fault::Kind::disk_full}) {
    INFO(to_string(kind));
    CHECK(kinds[kind] >= 20);  // every kind is drawn
  }
  CHECK(messy_links >= 10);
  CHECK(timed_links >= 10);
}

TEST_CASE("chaos: --chaos fills the faults, and refuses --faults beside it", "[chaos][sim]") {
  SimConfig cfg;
  cfg.peers = 8;
  cfg.chaos = "11:3";
  draw_chaos(cfg);
  CHECK(cfg.faults == chaos_faults({11, 3}, 8, cfg.training.epochs));
  CHECK(cfg.faults.size() > 20);
  SimConfig both;
  both.chaos = "11";
  both.faults = "kill:1@1ep";
  CHECK_THROWS_WITH(draw_chaos(both), Contains("give --faults or --chaos, not both"));
  SimConfig none;
  draw_chaos(none);
  CHECK(none.faults.empty());
}
