// Durations on the command line and in config files: "500ms", "2s", "1.5s", "2m", "1h",
// "250us", or a plain number of seconds.
#pragma once
#include <CLI/CLI.hpp>
#include <chrono>
#include <string>
#include <string_view>

namespace hearsay {

using Duration = std::chrono::nanoseconds;

// "500ms", "2s", "1.5s", "2m", "1h", "250us", or a plain number of seconds ("2", "0.5").
// std::invalid_argument naming `flag` and the accepted forms otherwise (negative, NaN,
// empty, unknown unit, out of range).
Duration parse_duration(std::string_view text, std::string_view flag);
// The shortest of the forms above that reads back to the same value: "500ms", "2s", "1.5s".
std::string format_duration(Duration d);
// A duration flag that writes `target` when given; its default shows as format_duration.
CLI::Option* add_duration(CLI::App& cmd, const std::string& name, Duration& target, const std::string& help);

}  // namespace hearsay
