#include "peer/duration_flag.hpp"

#include <array>
#include <charconv>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace hearsay {

namespace {

struct DurationUnit {
  std::string_view suffix;
  double nanoseconds;
};
// Two-letter suffixes first, so that "500ms" is not read as "500m" followed by "s".
constexpr std::array<DurationUnit, 5> kDurationUnits{
    {{"us", 1e3}, {"ms", 1e6}, {"s", 1e9}, {"m", 60e9}, {"h", 3600e9}}};

std::string duration_forms(std::string_view flag, std::string_view text) {
  return std::string(flag) + " '" + std::string(text) +
         "' is not a duration: use a number with a unit (500ms, 2s, 1.5s, 2m, 1h) or plain seconds (2)";
}

std::string seconds_text(double s) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, s);
  return std::string(buf, r.ptr);
}

CLI::Validator duration_validator() {
  return CLI::Validator(
      [](std::string& text) {
        try {
          parse_duration(text, "");
          return std::string();
        } catch (const std::invalid_argument&) {
          return "'" + text + "' is not a duration: use 500ms, 2s, 1.5s, 2m, 1h or plain seconds";
        }
      },
      "DURATION");
}

}  // namespace

Duration parse_duration(std::string_view text, std::string_view flag) {
  std::string_view number = text;
  double scale = 1e9;  // plain seconds
  for (const auto& unit : kDurationUnits) {
    if (number.size() > unit.suffix.size() &&
        number.substr(number.size() - unit.suffix.size()) == unit.suffix) {
      number.remove_suffix(unit.suffix.size());
      scale = unit.nanoseconds;
      break;
    }
  }
  double value = 0;
  const auto r = std::from_chars(number.data(), number.data() + number.size(), value);
  if (number.empty() || r.ec != std::errc() || r.ptr != number.data() + number.size() ||
      !std::isfinite(value) || value < 0)
    throw std::invalid_argument(duration_forms(flag, text));
  const double ns = value * scale;
  if (ns > static_cast<double>(std::numeric_limits<Duration::rep>::max() / 2))
    throw std::invalid_argument(std::string(flag) + " '" + std::string(text) + "' is too long");
  return Duration(static_cast<Duration::rep>(std::llround(ns)));
}

std::string format_duration(Duration d) {
  const auto ns = d.count();
  if (ns != 0 && ns < 1'000'000'000 && ns % 1'000'000 == 0) return std::to_string(ns / 1'000'000) + "ms";
  if (ns != 0 && ns < 1'000'000) return seconds_text(static_cast<double>(ns) / 1e3) + "us";
  if (ns != 0 && ns < 1'000'000'000) return seconds_text(static_cast<double>(ns) / 1e6) + "ms";
  return seconds_text(static_cast<double>(ns) / 1e9) + "s";
}

CLI::Option* add_duration(CLI::App& cmd, const std::string& name, Duration& target, const std::string& help) {
  return cmd
      .add_option_function<std::string>(
          name, [&target, name](const std::string& text) { target = parse_duration(text, name); }, help)
      ->type_name("DURATION")  // a string in the config file (base/toml_flags.hpp: kind_of)
      ->check(duration_validator())
      ->default_str(format_duration(target));
}

}  // namespace hearsay
