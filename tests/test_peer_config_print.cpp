// hearsay peer's settings declared once: every option of add_peer_options is a key of the
// config file in the section its group names (peer_config_file.cpp derives the keys),
// docs/CONFIG.md documents each in that section, and --print-config writes settings
// that --config reads back unchanged. Every test here runs over all the options, so a new
// flag is held to them by being declared.
#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "peer_config_test_util.hpp"

using namespace peer_config_test;

namespace {

// The printed settings of a parse of args, and the settings themselves.
struct Printed {
  PeerConfig cfg;
  std::string text;
};

Printed print_of(std::vector<std::string> args) {
  Printed out;
  CLI::App app{"hearsay peer"};
  add_peer_options(app, out.cfg);
  std::reverse(args.begin(), args.end());
  app.parse(args);
  out.text = print_config(app);
  return out;
}

// What reading `text` back with --config gives.
Printed read_back(const std::string& text) {
  TomlFile file(text);
  Printed again = print_of({"--config", file.str()});
  again.cfg.config_file.clear();
  return again;
}

std::vector<ConfigKey> all_keys() {
  static PeerConfig cfg;
  static CLI::App app;
  static const bool added = (add_peer_options(app, cfg), true);
  (void)added;
  return config_file_keys(app);
}

}  // namespace

TEST_CASE("peer config: every flag is a key in its --help group's section, and docs/CONFIG.md has it there",
          "[peer-config]") {
  // The documented sections: a line "`[section]`..." opens one, and each table row's
  // first cell names its flags.
  std::ifstream doc(std::string(HEARSAY_SOURCE_DIR) + "/docs/CONFIG.md");
  std::map<std::string, std::string> documented;  // flag -> section
  std::string line, section;
  const std::regex opening("^`\\[([a-z]+)\\]`.*"), flag("`--([a-z0-9-]+)`");
  std::smatch m;
  while (std::getline(doc, line)) {
    if (line.rfind("## ", 0) == 0) section.clear();  // another command's flags
    if (std::regex_match(line, m, opening)) section = m[1];
    if (section.empty() || line.rfind("| `--", 0) != 0) continue;
    const std::string first_cell = line.substr(0, line.find(" | ", 2));
    for (std::sregex_iterator it(first_cell.begin(), first_cell.end(), flag), end; it != end; ++it)
      documented.emplace((*it)[1], section);
  }
  const auto keys = all_keys();
  REQUIRE(keys.size() > 50);
  std::set<std::string> names;
  for (const auto& key : keys) {
    INFO("--" << key.name << " in group " << key.section);
    CHECK(names.insert(key.name).second);
    REQUIRE(documented.contains(key.name));
    CHECK(documented.at(key.name) == key.section);
  }
  // --skip-when-served and --no-lookahead are negations, not keys of their own.
  for (const auto& [name, where] : documented) {
    INFO("docs/CONFIG.md documents --" << name << " in [" << where << "]");
    CHECK((names.contains(name) || name == "skip-when-served" || name == "no-lookahead"));
  }
}

TEST_CASE("peer config: every key is taken in the file under its section and at the top level", "[peer-config]") {
  // Each key alone, with its default where it has one (as --print-config shows it), else
  // a value of its kind; a value the flag's own check refuses is refused naming the key,
  // never as an unknown key or a wrong type.
  const std::string defaults = print_of({}).text;
  for (const auto& key : all_keys()) {
    INFO(key.section << "." << key.name);
    std::smatch m;
    std::string value;
    if (std::regex_search(defaults, m, std::regex("\n" + key.name + " = ([^\n]*)\n"))) {
      value = m[1];
    } else {
      switch (key.kind) {
        case toml_flags::ValueKind::integer: value = "1"; break;
        case toml_flags::ValueKind::number: value = "0.5"; break;
        case toml_flags::ValueKind::boolean: value = "true"; break;
        case toml_flags::ValueKind::duration: value = "\"1s\""; break;
        case toml_flags::ValueKind::string: value = "\"x\""; break;
        case toml_flags::ValueKind::string_list: value = "[\"x\"]"; break;
      }
    }
    for (const std::string& text : {"[" + key.section + "]\n" + key.name + " = " + value + "\n",
                                    key.name + " = " + value + "\n"}) {
      const std::string error = config_error(text);
      CHECK_THAT(error, !Contains("unknown") && !Contains("must be"));
      if (!error.empty()) CHECK_THAT(error, Contains(key.name));
      if (error.empty()) CHECK_THAT(read_back(text).text, Contains("\n" + key.name + " = " + value + "\n"));
    }
  }
}

TEST_CASE("peer config: --print-config writes what --config reads back to the same settings", "[peer-config]") {
  // Packed by hand: clang-format puts one flag a line once the list is this long.
  // clang-format off
  const std::vector<std::vector<std::string>> cases{
      {},
      {"--listen", "tcp://127.0.0.1:7000", "--insecure", "--algo", "dpsgd", "--rank", "2", "--world", "4",
       "--graph", "exp", "--lr", "2e-7", "--momentum", "0.95", "--epochs", "7", "--round-timeout", "750ms",
       "--join", "tcp://a:1", "--join", "tcp://b:2#key \"quoted\"", "--skip-when-served", "--init-seed", "12",
       "--compress", "topk:1%", "--no-lookahead",
       "--bn-stats", "local", "--time-budget", "90s", "--slowdown", "2.5", "--link-peer", "rank1=1mbit,5ms",
       "--link-peer", "rank2=10mbit,1ms", "--epoch-eval", "false", "--snapshot-every", "0.37",
       "--weight-decay", "2.5e-6", "--id", "rank2", "--metrics", "m-{rank}.jsonl"},
  };
  // clang-format on
  for (const auto& args : cases) {
    const Printed first = print_of(args);
    INFO(first.text);
    const Printed again = read_back(first.text);
    CHECK(again.cfg == first.cfg);
    CHECK(again.text == first.text);
  }
  // The values are the ones given, to the bit, not rounded on the way.
  const PeerConfig c = print_of(cases[1]).cfg;
  CHECK(c.train.lr == 2e-7f);
  CHECK(c.train.weight_decay == 2.5e-6f);
  CHECK_FALSE(c.mixing.always_start_round);
  CHECK(c.network.join.size() == 2);
  // Every key is in the print, set or commented out.
  const std::string text = print_of({}).text;
  for (const auto& key : all_keys()) {
    INFO(key.name);
    CHECK((text.find("\n" + key.name + " = ") != std::string::npos ||
           text.find("\n# " + key.name + " =\n") != std::string::npos));
  }
}
