// What the two TOML readers share: `hearsay peer --config` (peer_config_file.cpp) and
// `hearsay sim --config` (sim/experiment_file.cpp) both read keys that are flags without
// their dashes and hand each value's text to that flag's CLI11 option, so a value passes
// the same validators and conversions as the flag. Errors are std::invalid_argument
// naming FILE:LINE and the key.
#pragma once
#include <toml++/toml.h>

#include <CLI/CLI.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace hearsay::toml_flags {

// What a TOML value must be for a key.
enum class ValueKind { string, integer, number, boolean, duration, string_list };

// The kind of value an option takes, from its declaration: a flag is a boolean, an
// option of many values a string list, and its type name (CLI11's INT, UINT, FLOAT,
// BOOLEAN, or DURATION for peer/duration_flag.hpp's) says the rest; anything else is a string.
ValueKind kind_of(const CLI::Option& option);

// The text of one value of `kind` as TOML writes it: strings quoted and escaped, numbers
// in the shortest form that reads back the same, durations as strings.
std::string toml_value(ValueKind kind, const std::string& text);

// "an integer", "a duration (a string such as \"500ms\" ...)", for "must be ...".
std::string_view kind_name(ValueKind kind);

// "FILE:LINE" of a place in the file.
std::string where(const std::string& file, const toml::source_region& source);

// What a TOML value is, for "..., not a string".
std::string_view node_type_name(toml::node_type type);

// The index of the candidate closest to `name` by edit distance, or -1 when none is close
// (more than a third of the name's length, and more than 2 edits, away).
int closest_index(std::string_view name, const std::vector<std::string>& candidates);
// "; did you mean 'X'?" for that candidate, or "".
std::string closest(std::string_view name, const std::vector<std::string>& candidates);

// The option's text for a TOML value of the kind it must be: "AT: 'KEY' must be KIND, not
// TYPE" otherwise. An empty array gives no value: refused, with `empty_hint` appended.
std::vector<std::string> value_strings(const toml::node& value, ValueKind kind, const std::string& at,
                                       std::string_view key, std::string_view empty_hint = "");

// Gives `option` (the flag --`flag`) the text of a file value, as the command line would,
// and runs its callback: "AT: 'KEY': what the option says" when it refuses.
void set_option(CLI::Option& option, std::string_view flag, const std::vector<std::string>& text,
                const std::string& at, std::string_view key);

}  // namespace hearsay::toml_flags
