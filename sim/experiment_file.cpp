// The experiment file of `hearsay sim`, read the way peer/peer_config_file.cpp reads the
// peer's: every key is a flag without its dashes (dashes only, as there), and its value is
// handed to that flag's CLI11 option, so it passes the same validators and conversions.
#include "sim/experiment_file.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <stdexcept>
#include <utility>

#include "base/toml_flags.hpp"

namespace hearsay::sim {
namespace {

using toml_flags::node_type_name;
using toml_flags::ValueKind;
using toml_flags::where;

struct FileKey {
  std::string name;  // the flag without its dashes
  ValueKind kind;    // from the option's type (toml_flags::kind_of)
};

// Every flag of add_sim_options is a key: the keys are read off the options themselves.
const std::vector<FileKey>& file_keys() {
  static const std::vector<FileKey> keys = [] {
    SimConfig config;
    CLI::App app;
    add_sim_options(app, config);
    std::vector<FileKey> out;
    for (const CLI::Option* option : app.get_options())
      if (!option->get_lnames().empty() && option->get_lnames().front() != "help")
        out.push_back({option->get_lnames().front(), toml_flags::kind_of(*option)});
    return out;
  }();
  return keys;
}
constexpr std::string_view kExperimentKey = "experiment";  // the [[experiment]] tables
constexpr std::string_view kNameKey = "name";              // only in an [[experiment]]
constexpr std::string_view kOutKey = "out";                // only at the top level

enum class Scope { top_level, experiment };

const FileKey* find_key(std::string_view name) {
  for (const auto& k : file_keys())
    if (k.name == name) return &k;
  return nullptr;
}

// The keys a scope accepts, in the order of file_keys().
std::vector<std::string> known_keys(Scope scope) {
  std::vector<std::string> keys;
  if (scope == Scope::experiment) keys.emplace_back(kNameKey);
  for (const auto& k : file_keys())
    if (scope == Scope::top_level || k.name != kOutKey) keys.emplace_back(k.name);
  if (scope == Scope::top_level) keys.emplace_back("[[" + std::string(kExperimentKey) + "]]");
  return keys;
}

std::string unknown_key_message(const std::string& at, const std::string& file, const std::string& name,
                                Scope scope) {
  const std::vector<std::string> keys = known_keys(scope);
  std::string dashed = name;
  std::replace(dashed.begin(), dashed.end(), '_', '-');
  std::string hint;
  if (dashed != name && std::find(keys.begin(), keys.end(), dashed) != keys.end()) {
    hint = "; keys are the flags' names with dashes: write '" + dashed + "'";
  } else {
    hint = toml_flags::closest(name, keys);
  }
  std::string list;
  for (const auto& k : keys) list += (list.empty() ? "" : ", ") + k;
  const std::string in = scope == Scope::experiment ? "an [[experiment]] table of " : "";
  return at + ": unknown key '" + name + "' in " + in + file + hint + " (known keys: " + list + ")";
}

// The options of add_sim_options bound to a SimConfig of our own. CLI11 options write
// through references to the object they were registered with; applying the file through
// `cmd`'s options would overwrite `base` (and whatever the caller holds) and leave results
// behind in `cmd`. A second registration has the very same validators and conversions but
// writes only here: `config` is set to base before each experiment (assignment keeps its
// address, so the bindings stay valid) and copied out after.
struct OwnedOptions {
  SimConfig config;  // declared before app: the options bind to it on construction
  CLI::App app;
  OwnedOptions() { add_sim_options(app, config); }

  void apply(std::string_view key, const std::vector<std::string>& text, const std::string& at) {
    const std::string name(key);
    CLI::Option* option = app.get_option_no_throw("--" + name);
    if (!option) throw std::logic_error("experiment file key '" + name + "' has no --" + name + " option");
    option->clear();  // a key set at the top level and again in an experiment replaces, not appends
    toml_flags::set_option(*option, name, text, at, name);
  }
};

struct Reader {
  std::string file;
  CLI::App& cmd;
  OwnedOptions target;   // the experiment being built
  OwnedOptions checker;  // checks the values that the command line overrides, then drops them

  Reader(std::string file_, CLI::App& cmd_) : file(std::move(file_)), cmd(cmd_) {}

  // Applies a table's keys in file order (toml::table is sorted by key), so that the
  // first error reported is the first in the file.
  void apply_table(const toml::table& table, Scope scope) {
    std::vector<std::pair<const toml::key*, const toml::node*>> entries;
    for (const auto& [key, value] : table) entries.emplace_back(&key, &value);
    std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
      const auto& pa = a.first->source().begin;
      const auto& pb = b.first->source().begin;
      return std::pair(pa.line, pa.column) < std::pair(pb.line, pb.column);
    });
    for (const auto& [key, value] : entries)
      apply_entry(key->str(), *value, where(file, key->source()), scope);
  }

  void apply_entry(std::string_view name, const toml::node& value, const std::string& at, Scope scope) {
    if (scope == Scope::top_level && name == kExperimentKey) return;  // read by load_experiment_file
    if (scope == Scope::experiment && name == kNameKey) return;       // read by experiment_name
    if (scope == Scope::top_level && name == kNameKey)
      throw std::invalid_argument(at + ": 'name' names one experiment: write it in an [[experiment]] table");
    if (scope == Scope::experiment && name == kOutKey)
      throw std::invalid_argument(at + ": 'out' is the directory of the whole sweep (each experiment " +
                                  "writes to OUT/NAME): set it at the top level or with --out");
    const FileKey* key = find_key(name);
    if (!key) throw std::invalid_argument(unknown_key_message(at, file, std::string(name), scope));
    // An experiment cannot empty a list set at the top level: [] gives no value at all.
    const std::vector<std::string> text =
        toml_flags::value_strings(value, key->kind, where(file, value.source()), name,
                                  " (an experiment cannot empty a top-level list; set the list in each "
                                  "experiment that needs it)");
    const CLI::Option* flag = cmd.get_option_no_throw("--" + std::string(name));
    const bool command_line_gave_it = flag && flag->count() > 0;
    (command_line_gave_it ? checker : target).apply(name, text, where(file, value.source()));
  }
};

toml::table parse(const std::string& file) {
  if (!std::ifstream(file))
    throw std::invalid_argument("cannot read experiment file '" + file + "': " + std::strerror(errno));
  try {
    return toml::parse_file(file);
  } catch (const toml::parse_error& e) {
    const auto& begin = e.source().begin;
    throw std::invalid_argument(file + ":" + std::to_string(begin.line) + ":" + std::to_string(begin.column) +
                                ": not valid TOML: " + std::string(e.description()));
  }
}

// The [[experiment]] tables of the file, in file order; none when it has no such key.
std::vector<const toml::table*> experiment_tables(const toml::table& root, const std::string& file) {
  std::vector<const toml::table*> tables;
  const toml::node* node = root.get(kExperimentKey);
  if (!node) return tables;
  const toml::array* array = node->as_array();
  const std::string at = where(file, node->source());
  if (!array || (!array->empty() && !array->is_array_of_tables()))
    throw std::invalid_argument(at + ": 'experiment' must be tables written [[experiment]], not " +
                                std::string(node_type_name(node->type())));
  if (array->empty())
    throw std::invalid_argument(at + ": 'experiment' is empty: add [[experiment]] tables or remove it");
  for (const toml::node& item : *array) tables.push_back(item.as_table());
  return tables;
}

bool is_valid_name(const std::string& name) {
  if (name.empty() || name == "." || name == "..") return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

// The experiment's name, checked; `lines` has the line of every name seen so far.
std::string experiment_name(const toml::table& table, const std::string& file,
                            std::map<std::string, std::uint32_t>& lines) {
  const toml::node* node = table.get(kNameKey);
  if (!node)
    throw std::invalid_argument(where(file, table.source()) +
                                ": this [[experiment]] has no name: add name = \"...\" (its results go "
                                "to OUT/NAME/)");
  const std::string at = where(file, node->source());
  const auto name = node->value_exact<std::string>();
  if (!name)
    throw std::invalid_argument(at + ": 'name' must be a string, not " +
                                std::string(node_type_name(node->type())));
  if (!is_valid_name(*name))
    throw std::invalid_argument(at + ": 'name' \"" + *name +
                                "\" is not a directory name: use letters, digits, '.', '_' and '-' "
                                "(and not \".\" or \"..\")");
  const auto [seen, added] = lines.emplace(*name, node->source().begin.line);
  if (!added)
    throw std::invalid_argument(at + ": 'name' \"" + *name + "\" is already the name of the experiment at " +
                                file + ":" + std::to_string(seen->second) +
                                ": names must be unique (each is a directory under OUT)");
  return *name;
}

}  // namespace

std::vector<Experiment> load_experiment_file(const std::filesystem::path& path, CLI::App& cmd,
                                             const SimConfig& base) {
  const std::string file = path.string();
  const toml::table root = parse(file);
  const std::vector<const toml::table*> tables = experiment_tables(root, file);
  std::map<std::string, std::uint32_t> name_lines;
  std::vector<std::string> names;
  for (const toml::table* table : tables) names.push_back(experiment_name(*table, file, name_lines));

  Reader reader(file, cmd);
  const auto build = [&](const toml::table* table, const std::string& name) {
    reader.target.config = base;
    reader.apply_table(root, Scope::top_level);
    const std::string sweep_out = reader.target.config.out;  // an experiment's table may not set it
    if (table) reader.apply_table(*table, Scope::experiment);
    if (sweep_out.empty()) throw std::invalid_argument("no out: give --out or out = \"DIR\" in " + file);
    Experiment e{name, reader.target.config};
    if (!name.empty()) e.config.out = (std::filesystem::path(sweep_out) / name).string();
    return e;
  };
  std::vector<Experiment> experiments;
  if (tables.empty()) experiments.push_back(build(nullptr, ""));
  for (std::size_t i = 0; i < tables.size(); ++i) experiments.push_back(build(tables[i], names[i]));
  return experiments;
}

}  // namespace hearsay::sim
