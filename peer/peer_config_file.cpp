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

#include "peer/peer_config.hpp"

namespace hearsay {

namespace {
// ---- the keys of the config file ------------------------------------------------------

// What a TOML value must be for a key.
enum class ValueKind { string, integer, number, boolean, duration, string_list };

std::string_view kind_name(ValueKind k) {
  switch (k) {
    case ValueKind::string:
      return "a string";
    case ValueKind::integer:
      return "an integer";
    case ValueKind::number:
      return "a number";
    case ValueKind::boolean:
      return "a boolean (true or false)";
    case ValueKind::duration:
      return "a duration (a string such as \"500ms\" or \"2s\", or a number of seconds)";
    case ValueKind::string_list:
      return "an array of strings";
  }
  return "?";
}

struct ConfigKey {
  std::string_view section;  // the table it may be written in
  std::string_view name;     // the flag without its dashes
  ValueKind kind;
};

// Every flag of `hearsay peer` but --config, by section; add_peer_options registers them all.
constexpr ConfigKey kConfigKeys[] = {
    {"network", "listen", ValueKind::string},
    {"network", "join", ValueKind::string_list},
    {"network", "join-key", ValueKind::string},
    {"network", "rank", ValueKind::integer},
    {"network", "world", ValueKind::integer},
    {"network", "wait-for-world", ValueKind::boolean},
    {"network", "id", ValueKind::string},
    {"network", "run", ValueKind::string},
    {"network", "keys", ValueKind::string},
    {"network", "authorized", ValueKind::string},
    {"network", "insecure", ValueKind::boolean},
    {"train", "model", ValueKind::string},
    {"train", "epochs", ValueKind::integer},
    {"train", "batch", ValueKind::integer},
    {"train", "lr", ValueKind::number},
    {"train", "momentum", ValueKind::number},
    {"train", "weight-decay", ValueKind::number},
    {"train", "nesterov", ValueKind::boolean},
    {"train", "optimizer", ValueKind::string},
    {"train", "lr-schedule", ValueKind::string},
    {"train", "data", ValueKind::string},
    {"train", "partition", ValueKind::string},
    {"train", "threads", ValueKind::integer},
    {"train", "seed", ValueKind::integer},
    {"train", "device", ValueKind::string},
    {"gossip", "algo", ValueKind::string},
    {"gossip", "graph", ValueKind::string},
    {"gossip", "directed", ValueKind::boolean},
    {"gossip", "rows", ValueKind::integer},
    {"gossip", "degree", ValueKind::integer},
    {"gossip", "graph-seed", ValueKind::integer},
    {"gossip", "graph-file", ValueKind::string},
    {"gossip", "weights", ValueKind::string},
    {"gossip", "gossip-every", ValueKind::integer},
    {"gossip", "fanout", ValueKind::integer},
    {"gossip", "round-timeout", ValueKind::duration},
    {"gossip", "compress", ValueKind::string},
    {"gossip", "overlap", ValueKind::boolean},
    {"gossip", "always-start-round", ValueKind::boolean},
    {"membership", "heartbeat", ValueKind::duration},
    {"membership", "suspect-after", ValueKind::duration},
    {"membership", "dead-after", ValueKind::duration},
    {"membership", "join-timeout", ValueKind::duration},
    {"output", "metrics", ValueKind::string},
    {"output", "log-every", ValueKind::number},
    {"output", "http", ValueKind::string},
    {"checkpoint", "checkpoint", ValueKind::string},
    {"checkpoint", "checkpoint-every", ValueKind::duration},
    {"checkpoint", "resume", ValueKind::boolean},
    {"checkpoint", "initial-state", ValueKind::string},
    {"checkpoint", "snapshot-every", ValueKind::number},
    {"emulation", "slowdown", ValueKind::number},
    {"emulation", "min-step-time", ValueKind::duration},
    {"emulation", "link", ValueKind::string},
    {"emulation", "link-others", ValueKind::string},
    {"emulation", "link-peer", ValueKind::string_list},
    {"emulation", "control-file", ValueKind::string},
};

const ConfigKey* find_key(std::string_view name) {
  for (const auto& k : kConfigKeys)
    if (k.name == name) return &k;
  return nullptr;
}

bool is_section(std::string_view name) {
  return std::any_of(std::begin(kConfigKeys), std::end(kConfigKeys),
                     [&](const ConfigKey& k) { return k.section == name; });
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// "; did you mean 'train.epochs'?" for the known key closest to `name` (a key name, or a
// section name when `section_names`), or "" when nothing is close.
std::string suggestion(std::string_view name, bool section_names) {
  std::string best;
  std::size_t best_distance = std::numeric_limits<std::size_t>::max();
  for (const auto& k : kConfigKeys) {
    const std::string_view candidate = section_names ? k.section : k.name;
    const std::size_t d = edit_distance(name, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = section_names ? "[" + std::string(k.section) + "]"
                           : std::string(k.section) + "." + std::string(k.name);
    }
  }
  if (best_distance > std::max<std::size_t>(2, name.size() / 3)) return "";
  return "; did you mean '" + best + "'?";
}

std::string where(const std::string& path, const toml::source_region& source) {
  return path + ":" + std::to_string(source.begin.line);
}

// What a TOML value is, for "must be an integer, not a string".
std::string_view node_type_name(toml::node_type type) {
  switch (type) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a floating-point number";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::table:
      return "a table";
    default:
      return "a date or time";
  }
}

// The option's text for a TOML value of the kind it must be; CLI::ConfigError otherwise.
std::vector<std::string> value_strings(const toml::node& value, ValueKind kind, const std::string& at,
                                       const std::string& key) {
  auto wrong = [&] {
    return CLI::ConfigError(at + ": '" + key + "' must be " + std::string(kind_name(kind)) + ", not " +
                            std::string(node_type_name(value.type())));
  };
  switch (kind) {
    case ValueKind::string:
      if (auto s = value.value_exact<std::string>()) return {*s};
      throw wrong();
    case ValueKind::integer:
      if (auto i = value.value_exact<std::int64_t>()) return {std::to_string(*i)};
      throw wrong();
    case ValueKind::number:
      if (auto i = value.value_exact<std::int64_t>()) return {std::to_string(*i)};
      if (auto f = value.value_exact<double>()) {
        char buf[64];
        const auto r = std::to_chars(buf, buf + sizeof buf, *f);
        return {std::string(buf, r.ptr)};
      }
      throw wrong();
    case ValueKind::boolean:
      if (auto b = value.value_exact<bool>()) return {*b ? "true" : "false"};
      throw wrong();
    case ValueKind::duration:
      if (auto s = value.value_exact<std::string>()) return {*s};
      if (value.is_integer() || value.is_floating_point())
        return value_strings(value, ValueKind::number, at, key);
      throw wrong();
    case ValueKind::string_list: {
      if (auto s = value.value_exact<std::string>()) return {*s};
      const toml::array* array = value.as_array();
      if (!array) throw wrong();
      std::vector<std::string> out;
      for (const toml::node& item : *array) {
        auto s = item.value_exact<std::string>();
        if (!s) throw wrong();
        out.push_back(*s);
      }
      return out;
    }
  }
  throw wrong();
}

// Hands one file value to its option, unless the command line gave that option.
void apply_value(CLI::App& cmd, const ConfigKey& key, const toml::node& value, const std::string& path,
                 std::set<std::string_view>& seen) {
  const std::string at = where(path, value.source());
  const std::string qualified = std::string(key.section) + "." + std::string(key.name);
  if (!seen.insert(key.name).second)
    throw CLI::ConfigError(at + ": '" + std::string(key.name) +
                           "' is given twice (at the top level and in [" + std::string(key.section) +
                           "]): keep one");
  CLI::Option* option = cmd.get_option_no_throw("--" + std::string(key.name));
  if (!option)
    throw std::logic_error("config key '" + qualified + "' has no --" + std::string(key.name) + " option");
  const std::vector<std::string> text = value_strings(value, key.kind, at, qualified);
  if (option->count() > 0) return;  // the command line wins
  try {
    if (option->get_expected_min() == 0) {
      option->add_result(option->get_flag_value(std::string(key.name), text.front()));
    } else {
      option->add_result(text);
    }
    option->run_callback();
  } catch (const CLI::Error& e) {
    throw CLI::ConfigError(at + ": '" + qualified + "': " + e.what());
  }
}

}  // namespace

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
  std::set<std::string_view> seen;
  for (const auto& [key, value] : root) {
    const std::string name(key.str());
    if (is_section(name)) {
      const toml::table* table = value.as_table();
      if (!table)
        throw CLI::ConfigError(where(path, key.source()) + ": '" + name + "' must be a table ([" + name +
                               "])");
      for (const auto& [inner_key, inner_value] : *table) {
        const std::string inner(inner_key.str());
        const ConfigKey* k = find_key(inner);
        if (!k || k->section != name) {
          const std::string hint =
              k ? "; '" + inner + "' belongs in [" + std::string(k->section) + "]" : suggestion(inner, false);
          throw CLI::ConfigError(where(path, inner_key.source()) + ": unknown key '" + name + "." + inner +
                                 "' in " + path + hint);
        }
        apply_value(cmd, *k, inner_value, path, seen);
      }
    } else if (const ConfigKey* k = find_key(name)) {
      apply_value(cmd, *k, value, path, seen);
    } else {
      const std::string hint = value.is_table() ? suggestion(name, true) : suggestion(name, false);
      throw CLI::ConfigError(where(path, key.source()) + ": unknown " +
                             (value.is_table() ? "table [" : "key '") + name +
                             (value.is_table() ? "]" : "'") + " in " + path + hint);
    }
  }
}

}  // namespace hearsay
