// The TOML config file of `hearsay peer` (--config FILE): every key is a flag without its
// dashes, written at the top level or in its section's table. Values are handed to the
// flag's CLI11 option, so they pass the same validators and conversions as flags, and only
// options the command line did not give are set.
#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "base/toml_flags.hpp"
#include "peer/peer_config.hpp"

namespace hearsay {

namespace {
using toml_flags::ValueKind;

// The section's name before it was [mixing], refused with the new name.
constexpr std::string_view kOldMixingSection = "gossip";

const ConfigKey* find_key(const std::vector<ConfigKey>& keys, std::string_view name) {
  for (const auto& k : keys)
    if (k.name == name) return &k;
  return nullptr;
}

bool is_section(const std::vector<ConfigKey>& keys, std::string_view name) {
  return std::any_of(keys.begin(), keys.end(), [&](const ConfigKey& k) { return k.section == name; });
}

// "; did you mean 'train.epochs'?" for the known key closest to `name` (a key name, or a
// section name when `section_names`), or "" when nothing is close.
std::string suggestion(const std::vector<ConfigKey>& keys, std::string_view name, bool section_names) {
  std::vector<std::string> names, shown;
  for (const auto& k : keys) {
    names.emplace_back(section_names ? k.section : k.name);
    shown.push_back(section_names ? "[" + std::string(k.section) + "]"
                                  : std::string(k.section) + "." + std::string(k.name));
  }
  const int i = toml_flags::closest_index(name, names);
  return i < 0 ? "" : "; did you mean '" + shown[static_cast<std::size_t>(i)] + "'?";
}

std::string where(const std::string& path, const toml::source_region& source) {
  return toml_flags::where(path, source);
}

// Hands one file value to its option, unless the command line gave that option.
void apply_value(CLI::App& cmd, const ConfigKey& key, const toml::node& value, const std::string& path,
                 std::set<std::string>& seen) {
  const std::string at = where(path, value.source());
  const std::string qualified = key.section + "." + key.name;
  if (!seen.insert(key.name).second)
    throw CLI::ConfigError(at + ": '" + std::string(key.name) +
                           "' is given twice (at the top level and in [" + std::string(key.section) +
                           "]): keep one");
  CLI::Option* option = cmd.get_option_no_throw("--" + key.name);
  if (!option)
    throw std::logic_error("config key '" + qualified + "' has no --" + std::string(key.name) + " option");
  // Errors are CLI::ConfigError here: CLI11 prints them as parse errors of --config.
  try {
    const std::vector<std::string> text = toml_flags::value_strings(value, key.kind, at, qualified);
    if (option->count() > 0) return;  // the command line wins
    toml_flags::set_option(*option, key.name, text, at, qualified);
  } catch (const std::invalid_argument& e) {
    throw CLI::ConfigError(e.what());
  }
}

}  // namespace

std::vector<ConfigKey> config_file_keys(const CLI::App& cmd) {
  std::vector<ConfigKey> keys;
  for (const CLI::Option* option : cmd.get_options()) {
    if (option->get_group() == "Options" || option->get_lnames().empty()) continue;
    keys.push_back({option->get_group(), option->get_lnames().front(), toml_flags::kind_of(*option), option});
  }
  return keys;
}

std::string print_config(const CLI::App& cmd) {
  std::string out =
      "# The settings of this peer, as hearsay peer --print-config printed them: every key, in\n"
      "# its section; a commented-out key is not set. hearsay peer --config FILE reads them back.\n";
  std::string section;
  for (const ConfigKey& key : config_file_keys(cmd)) {
    if (key.section != section) {
      section = key.section;
      out += "\n[" + section + "]\n";
    }
    const CLI::Option& option = *key.option;
    std::vector<std::string> values;
    if (key.kind == ValueKind::string_list) {
      values = option.count() > 0 ? option.results() : std::vector<std::string>{};
    } else if (key.kind == ValueKind::boolean) {  // given, or its default (a flag without one: off)
      bool on = false;
      if (option.count() > 0)
        on = option.as<bool>();
      else if (!option.get_default_str().empty())
        CLI::detail::lexical_cast(option.get_default_str(), on);
      values = {on ? "true" : "false"};
    } else if (option.count() > 0) {
      values = {option.as<std::string>()};  // the multi-option policy's pick (TakeLast)
    } else if (!option.get_default_str().empty()) {
      values = {option.get_default_str()};
    }
    if (values.empty()) {
      out += "# " + key.name + " =\n";
      continue;
    }
    const ValueKind item_kind = key.kind == ValueKind::string_list ? ValueKind::string : key.kind;
    std::string text;
    for (const auto& v : values) text += (text.empty() ? "" : ", ") + toml_flags::toml_value(item_kind, v);
    out += key.name + " = " + (key.kind == ValueKind::string_list ? "[" + text + "]" : text) + "\n";
  }
  return out;
}

void apply_config_file(CLI::App& cmd, const std::string& path) {
  {
    std::ifstream probe(path);
    if (!probe)
      throw CLI::ConfigError("--config: cannot read config file '" + path + "': " + std::strerror(errno));
  }
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw CLI::ConfigError(where(path, e.source()) + ": not valid TOML: " + std::string(e.description()));
  }
  const std::vector<ConfigKey> keys = config_file_keys(cmd);
  std::set<std::string> seen;
  for (const auto& [key, value] : root) {
    const std::string name(key.str());
    if (name == kOldMixingSection && value.is_table())
      throw CLI::ConfigError(where(path, key.source()) + ": the table [gossip] is now [mixing] (its keys are the "
                             "same): rename it");
    // `checkpoint` is a section and a key: a table is the section, anything else the key.
    if (is_section(keys, name) && (value.is_table() || !find_key(keys, name))) {
      const toml::table* table = value.as_table();
      if (!table)
        throw CLI::ConfigError(where(path, key.source()) + ": '" + name + "' must be a table ([" + name +
                               "])");
      for (const auto& [inner_key, inner_value] : *table) {
        const std::string inner(inner_key.str());
        const ConfigKey* k = find_key(keys, inner);
        if (!k || k->section != name) {
          const std::string hint =
              k ? "; '" + inner + "' belongs in [" + k->section + "]" : suggestion(keys, inner, false);
          throw CLI::ConfigError(where(path, inner_key.source()) + ": unknown key '" + name + "." + inner +
                                 "' in " + path + hint);
        }
        apply_value(cmd, *k, inner_value, path, seen);
      }
    } else if (const ConfigKey* k = find_key(keys, name)) {
      apply_value(cmd, *k, value, path, seen);
    } else {
      const std::string hint = value.is_table() ? suggestion(keys, name, true) : suggestion(keys, name, false);
      throw CLI::ConfigError(where(path, key.source()) + ": unknown " +
                             (value.is_table() ? "table [" : "key '") + name +
                             (value.is_table() ? "]" : "'") + " in " + path + hint);
    }
  }
}

}  // namespace hearsay
