#include "gossip/network/emulation/link_spec.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <vector>

#include "gossip/network/emulation/spec_text.hpp"

namespace hearsay::emulation {
namespace {

[[noreturn]] void fail(std::string_view text, const std::string& why) {
  throw std::invalid_argument("link '" + std::string(text) + "': " + why +
                              " (expected RATE,DELAY[,loss=P], e.g. 1gbit,1ms or 1mbit,20ms,loss=0.05)");
}

// A non-negative finite number followed by a unit from `units` (name, scale).
template <std::size_t N>
double number_with_unit(std::string_view text, std::string_view part, std::string_view what,
                        const std::pair<std::string_view, double> (&units)[N]) {
  double value = 0;
  const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), value);
  if (ec != std::errc() || end == part.data())
    fail(text, std::string(what) + " '" + std::string(part) + "' does not start with a number");
  if (!std::isfinite(value) || value < 0)
    fail(text, std::string(what) + " '" + std::string(part) + "' must be a non-negative number");
  const std::string_view unit(end, static_cast<std::size_t>(part.data() + part.size() - end));
  std::string known;
  for (const auto& [name, scale] : units) {
    if (unit == name) return value * scale;
    known += (known.empty() ? "" : ", ") + std::string(name);
  }
  fail(text, std::string(what) + " '" + std::string(part) + "' needs a unit: " + known);
}

constexpr std::pair<std::string_view, double> kRateUnits[] = {
    {"bit", 1.0}, {"kbit", 1e3}, {"mbit", 1e6}, {"gbit", 1e9}};
constexpr std::pair<std::string_view, double> kDelayUnits[] = {{"us", 1e-6}, {"ms", 1e-3}, {"s", 1.0}};

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace

LinkSpec LinkSpec::between(const LinkSpec& a, const LinkSpec& b) noexcept {
  LinkSpec l;
  if (a.bits_per_second > 0 && b.bits_per_second > 0)
    l.bits_per_second = std::min(a.bits_per_second, b.bits_per_second);
  else
    l.bits_per_second = std::max(a.bits_per_second, b.bits_per_second);  // the limited one, if any
  l.delay_seconds = std::max(a.delay_seconds, b.delay_seconds);
  l.loss = 1.0 - (1.0 - a.loss) * (1.0 - b.loss);
  return l;
}

LinkSpec parse_link_spec(std::string_view text) {
  const auto parts = split_trimmed(text, ',');
  if (parts.size() < 2 || parts.size() > 3) fail(text, "needs a rate and a delay");
  LinkSpec spec;
  if (parts[0] != "unlimited") {
    spec.bits_per_second = number_with_unit(text, parts[0], "rate", kRateUnits);
    if (spec.bits_per_second <= 0) fail(text, "a rate must be above 0 (or 'unlimited')");
  }
  spec.delay_seconds = number_with_unit(text, parts[1], "delay", kDelayUnits);
  if (spec.delay_seconds > 60) fail(text, "a delay above 60 s is not a link");
  if (parts.size() == 3) {
    const std::string_view p = parts[2];
    if (p.substr(0, 5) != "loss=") fail(text, "the third field must be loss=P");
    const std::string_view v = p.substr(5);
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), spec.loss);
    if (ec != std::errc() || end != v.data() + v.size() || v.empty())
      fail(text, "loss '" + std::string(v) + "' is not a number");
    if (!(spec.loss >= 0 && spec.loss < 1)) fail(text, "loss must be in [0, 1)");
  }
  return spec;
}

std::string to_string(const LinkSpec& spec) {
  std::string rate;
  if (spec.bits_per_second <= 0) {
    rate = "unlimited";
  } else {
    // The largest unit that keeps the number at least 1.
    double v = spec.bits_per_second;
    const char* unit = "bit";
    for (const auto& [name, scale] : kRateUnits)
      if (spec.bits_per_second >= scale) {
        v = spec.bits_per_second / scale;
        unit = name.data();
      }
    rate = number_text(v) + unit;
  }
  std::string delay;
  if (spec.delay_seconds >= 1 || spec.delay_seconds == 0)
    delay = number_text(spec.delay_seconds) + "s";
  else if (spec.delay_seconds >= 1e-3)
    delay = number_text(spec.delay_seconds * 1e3) + "ms";
  else
    delay = number_text(spec.delay_seconds * 1e6) + "us";
  std::string out = rate + "," + delay;
  if (spec.loss > 0) out += ",loss=" + number_text(spec.loss);
  return out;
}

}  // namespace hearsay::emulation
