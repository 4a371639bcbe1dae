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
// ---- the keys of the config file ------------------------------------------------------

using toml_flags::ValueKind;

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
    {"network", "min-peers", ValueKind::integer},
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
    {"train", "init-seed", ValueKind::integer},
    {"train", "device", ValueKind::string},
    {"train", "budget", ValueKind::string},
    {"train", "time-budget", ValueKind::duration},
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
    {"gossip", "bn-stats", ValueKind::string},
    {"membership", "heartbeat", ValueKind::duration},
    {"membership", "suspect-after", ValueKind::duration},
    {"membership", "dead-after", ValueKind::duration},
    {"membership", "join-timeout", ValueKind::duration},
    {"output", "metrics", ValueKind::string},
    {"output", "log-every", ValueKind::number},
    {"output", "epoch-eval", ValueKind::boolean},
    {"output", "http", ValueKind::string},
    {"output", "ready-file", ValueKind::string},
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
    {"emulation", "link-hold-at", ValueKind::string},
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

// "; did you mean 'train.epochs'?" for the known key closest to `name` (a key name, or a
// section name when `section_names`), or "" when nothing is close.
std::string suggestion(std::string_view name, bool section_names) {
  std::vector<std::string> names, shown;
  for (const auto& k : kConfigKeys) {
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

std::vector<std::string> config_file_keys() {
  std::vector<std::string> keys;
  for (const auto& k : kConfigKeys) keys.push_back(std::string(k.section) + "." + std::string(k.name));
  return keys;
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
