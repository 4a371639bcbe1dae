// Helpers shared by test_peer_config.cpp and test_peer_config_emulation.cpp.
#pragma once
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "peer/peer_config.hpp"
#include "model/zoo.hpp"
#include "peer/ready_file.hpp"
#include "test_support.hpp"

using namespace hearsay;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using hearsay::testing::TempPath;

namespace peer_config_test {

// Parses args (without the program name) as `hearsay peer` would.
inline PeerConfig parse_peer(std::vector<std::string> args) {
  PeerConfig cfg;
  CLI::App app{"hearsay peer"};
  add_peer_options(app, cfg);
  std::reverse(args.begin(), args.end());  // CLI11 takes a vector last argument first
  app.parse(args);
  return cfg;
}

// The flags every valid peer needs, followed by extra.
inline std::vector<std::string> with_base(std::vector<std::string> extra) {
  std::vector<std::string> args{"--listen", "tcp://127.0.0.1:7000", "--insecure"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// The message of what parsing then validating throws, or "" when the config is valid.
inline std::string problem(const std::vector<std::string>& args) {
  try {
    validate(parse_peer(args));
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

// A TOML file with the given text, removed at the end of the test.
struct TomlFile {
  TempPath path{".toml"};
  explicit TomlFile(const std::string& text) { std::ofstream(path.path()) << text; }
  std::string str() const { return path.str(); }
};

inline std::string config_error(const std::string& toml_text, std::vector<std::string> extra = {}) {
  TomlFile file(toml_text);
  std::vector<std::string> args = with_base({"--config", file.str()});
  args.insert(args.end(), extra.begin(), extra.end());
  try {
    parse_peer(args);
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

}  // namespace peer_config_test
