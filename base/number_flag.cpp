#include "base/number_flag.hpp"

#include <charconv>
#include <cmath>
#include <sstream>

namespace hearsay {
namespace {

std::string shortest(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

}  // namespace

std::string check_number(const std::string& text, const NumberRange& range) {
  std::string bounds = (range.min_open ? " above " : " of at least ") + shortest(range.min);
  if (range.max)
    bounds += std::string(range.max_open ? " and below " : " and at most ") + shortest(*range.max);
  const std::string expected = "; expected " + range.what + bounds + ", e.g. " + range.example;
  double v = 0;
  const char* begin = text.data();
  const char* end = begin + text.size();
  if (begin != end && *begin == '+') ++begin;  // from_chars takes no '+'
  const auto [stop, ec] = std::from_chars(begin, end, v);
  if (text.empty() || ec == std::errc::invalid_argument || stop != end)
    return "'" + text + "' is not a number" + expected;
  if (ec == std::errc::result_out_of_range || !std::isfinite(v))
    return "'" + text + "' is not a finite number" + expected;
  if (v < range.min) return "'" + text + "' is below " + shortest(range.min) + expected;
  if (range.min_open && v == range.min)
    return "'" + text + "' is not above " + shortest(range.min) + expected;
  if (range.max && (v > *range.max || (range.max_open && v == *range.max)))
    return "'" + text + "' is " + (range.max_open && v == *range.max ? "not below " : "above ") +
           shortest(*range.max) + expected;
  return {};
}

CLI::Validator number_in(NumberRange range) {
  std::string description = "NUMBER";
  return CLI::Validator([range](std::string& text) { return check_number(text, range); }, description);
}

template <class T>
static std::string shortest_round_trip(T value) {
  char buffer[64];  // the longest shortest form of a double is 24 characters
  const auto [end, error] = std::to_chars(buffer, buffer + sizeof buffer, value);
  if (error != std::errc()) return std::to_string(value);
  return std::string(buffer, end);
}

std::string exact_flag_number(float value) { return shortest_round_trip(value); }
std::string exact_flag_number(double value) { return shortest_round_trip(value); }

}  // namespace hearsay
