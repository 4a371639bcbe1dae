// Link specs ("1gbit,1ms,loss=0.05"): the simulator's --link and link faults, and a
// peer's link emulation, all read them with parse_link_spec.
#include <catch2/catch.hpp>
#include <stdexcept>
#include <string>

#include "gossip/network/emulation/link_spec.hpp"

using Catch::Matchers::Contains;
using hearsay::emulation::LinkSpec;
using hearsay::emulation::parse_link_spec;

TEST_CASE("link specs parse rate, delay and loss with their units", "[link-spec]") {
  const LinkSpec a = parse_link_spec("1gbit,1ms");
  CHECK(a.bits_per_second == 1e9);
  CHECK(a.delay_seconds == Approx(1e-3));
  CHECK(a.loss == 0);
  const LinkSpec b = parse_link_spec("1mbit, 20ms, loss=0.05");
  CHECK(b.bits_per_second == 1e6);
  CHECK(b.delay_seconds == Approx(0.020));
  CHECK(b.loss == Approx(0.05));
  CHECK(parse_link_spec("2.5gbit,500us").bits_per_second == 2.5e9);
  CHECK(parse_link_spec("2.5gbit,500us").delay_seconds == Approx(500e-6));
  CHECK(parse_link_spec("800kbit,0s").bits_per_second == 8e5);
  CHECK(parse_link_spec("unlimited,2s").bits_per_second == 0);
  CHECK_FALSE(parse_link_spec("unlimited,0s").emulated());
  CHECK(parse_link_spec("unlimited,0s,loss=0.1").emulated());
  // dup and reorder, in any order after the delay.
  const LinkSpec messy = parse_link_spec("1gbit,1ms,reorder=0.25,loss=0.01,dup=0.5");
  CHECK(messy.loss == Approx(0.01));
  CHECK(messy.dup == Approx(0.5));
  CHECK(messy.reorder == Approx(0.25));
  CHECK(parse_link_spec("unlimited,0s,dup=0.1").emulated());
  CHECK(parse_link_spec("unlimited,0s,reorder=0.1").emulated());
  // 516 KB of LeNet parameters over 1 Gbit/s: 4.1 ms on the wire.
  CHECK(a.transmit_seconds(516'272) == Approx(516'272 * 8 / 1e9));
  CHECK(parse_link_spec("unlimited,1ms").transmit_seconds(1 << 20) == 0);
}

TEST_CASE("link specs print back to what they parse from", "[link-spec]") {
  for (const char* text : {"1gbit,1ms", "1mbit,20ms,loss=0.05", "2.5gbit,500us", "unlimited,0s", "100bit,2s",
                           "1gbit,1ms,dup=0.05", "1gbit,1ms,loss=0.01,dup=0.02,reorder=0.1"}) {
    INFO(text);
    const LinkSpec spec = parse_link_spec(text);
    CHECK(to_string(spec) == text);
    CHECK(parse_link_spec(to_string(spec)) == spec);
  }
}

TEST_CASE("the link between two peers is the slower rate, the longer delay and both losses", "[link-spec]") {
  const LinkSpec fast = parse_link_spec("1gbit,1ms"), slow = parse_link_spec("1mbit,20ms,loss=0.1");
  const LinkSpec both = LinkSpec::between(fast, slow);
  CHECK(both.bits_per_second == 1e6);
  CHECK(both.delay_seconds == Approx(0.020));
  CHECK(both.loss == Approx(0.1));
  CHECK(LinkSpec::between(slow, slow).loss == Approx(1 - 0.9 * 0.9));
  const LinkSpec messy = parse_link_spec("1gbit,1ms,dup=0.2,reorder=0.5");
  CHECK(LinkSpec::between(fast, messy).dup == Approx(0.2));
  CHECK(LinkSpec::between(messy, messy).dup == Approx(1 - 0.8 * 0.8));
  CHECK(LinkSpec::between(messy, fast).reorder == Approx(0.5));
  // An unlimited side does not lift the other's limit.
  CHECK(LinkSpec::between(parse_link_spec("unlimited,0s"), slow).bits_per_second == 1e6);
}

TEST_CASE("bad link specs are refused with the text and the expected form", "[link-spec]") {
  for (const char* text : {"",
                           "1gbit",
                           "1gbit,1ms,loss=0.1,x",
                           "fast,1ms",
                           "1gb,1ms",
                           "1gbit,1",
                           "1gbit,1min",
                           "-1mbit,1ms",
                           "0mbit,1ms",
                           "1gbit,-1ms",
                           "1gbit,61s",
                           "1gbit,1ms,loss=1",
                           "1gbit,1ms,loss=-0.1",
                           "1gbit,1ms,loss=x",
                           "1gbit,1ms,drop=0.1",
                           "nanmbit,1ms",
                           "infgbit,1ms",
                           "1gbit,1ms,dup=1",
                           "1gbit,1ms,reorder=-0.5",
                           "1gbit,1ms,dup=0.1,dup=0.2",
                           "1gbit,1ms,loss",
                           "1gbit,1ms,loss=0.1,dup=0.1,reorder=0.1,x=1"}) {
    INFO(text);
    try {
      parse_link_spec(text);
      FAIL("accepted");
    } catch (const std::invalid_argument& e) {
      CHECK_THAT(e.what(), Contains("link '" + std::string(text) + "'"));
      CHECK_THAT(e.what(), Contains("RATE,DELAY"));
    }
  }
}
