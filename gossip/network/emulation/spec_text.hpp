// The small text helpers of the spec parsers ("1gbit,1ms,loss=0.05" here, the
// simulator's fault SPEC in sim/fault_spec.cpp): both read fields separated by a
// character, with whitespace around a field ignored.
#pragma once
#include <string_view>
#include <vector>

namespace hearsay::emulation {

// s without leading and trailing spaces, tabs, CRs and LFs.
inline std::string_view trim(std::string_view s) {
  constexpr std::string_view kWhitespace = " \t\r\n";
  const auto first = s.find_first_not_of(kWhitespace);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(kWhitespace) - first + 1);
}

// The fields of s between each `sep`, trimmed; one field (s itself) when there is none.
inline std::vector<std::string_view> split_trimmed(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  for (;;) {
    const auto at = s.find(sep);
    parts.push_back(trim(s.substr(0, at)));
    if (at == std::string_view::npos) return parts;
    s.remove_prefix(at + 1);
  }
}

}  // namespace hearsay::emulation
