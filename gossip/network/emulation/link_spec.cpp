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
                              " (expected RATE,DELAY[,loss=P][,dup=P][,reorder=P], e.g. "
                              "1gbit,1ms or 1mbit,20ms,loss=0.05)");
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
  const auto either = [](double p, double q) { return 1.0 - (1.0 - p) * (1.0 - q); };
  l.loss = either(a.loss, b.loss);
  l.dup = either(a.dup, b.dup);
  l.reorder = either(a.reorder, b.reorder);
  return l;
}

LinkSpec parse_link_spec(std::string_view text) {
  const auto parts = split_trimmed(text, ',');
  if (parts.size() < 2 || parts.size() > 5)
    fail(text, "needs a rate and a delay, then at most loss, dup and reorder");
  LinkSpec spec;
  if (parts[0] != "unlimited") {
    spec.bits_per_second = number_with_unit(text, parts[0], "rate", kRateUnits);
    if (spec.bits_per_second <= 0) fail(text, "a rate must be above 0 (or 'unlimited')");
  }
  spec.delay_seconds = number_with_unit(text, parts[1], "delay", kDelayUnits);
  if (spec.delay_seconds > 60) fail(text, "a delay above 60 s is not a link");
  const std::pair<std::string_view, double LinkSpec::*> options[] = {
      {"loss", &LinkSpec::loss}, {"dup", &LinkSpec::dup}, {"reorder", &LinkSpec::reorder}};
  std::vector<std::string_view> seen;
  for (std::size_t i = 2; i < parts.size(); ++i) {
    const std::string_view p = parts[i];
    const auto eq = p.find('=');
    const std::string_view name = p.substr(0, eq);
    const auto option =
        std::find_if(std::begin(options), std::end(options), [&](const auto& o) { return o.first == name; });
    if (eq == std::string_view::npos || option == std::end(options))
      fail(text, "'" + std::string(p) + "' is not loss=P, dup=P or reorder=P");
    if (std::ranges::find(seen, name) != seen.end()) fail(text, std::string(name) + " is given twice");
    seen.push_back(name);
    const std::string_view v = p.substr(eq + 1);
    double& value = spec.*(option->second);
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), value);
    if (ec != std::errc() || end != v.data() + v.size() || v.empty())
      fail(text, std::string(name) + " '" + std::string(v) + "' is not a number");
    if (!(value >= 0 && value < 1)) fail(text, std::string(name) + " must be in [0, 1)");
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
  if (spec.dup > 0) out += ",dup=" + number_text(spec.dup);
  if (spec.reorder > 0) out += ",reorder=" + number_text(spec.reorder);
  return out;
}

}  // namespace hearsay::emulation
