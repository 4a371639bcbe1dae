// The repository as a user clones it: its documents and code point at nothing outside it.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

TEST_CASE("repository: no file points at documents outside the clone", "[repository]") {
  // Built from parts, so that this file does not name them itself.
  const std::string outside[] = {std::string("../") + "shared", std::string("DESIGN") + ".md"};
  const fs::path root = HEARSAY_SOURCE_DIR;
  int files = 0;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
    const std::string name = it->path().filename().string();
    if (it->is_directory() && (name == "build" || name == "out" || name.starts_with("."))) {
      it.disable_recursion_pending();
      continue;
    }
    const std::string ext = it->path().extension().string();
    if (!it->is_regular_file() || !(ext == ".md" || ext == ".cpp" || ext == ".hpp" || ext == ".cu" ||
                                    ext == ".py" || ext == ".toml" || ext == ".txt" || ext == ".sh"))
      continue;
    std::ifstream in(it->path());
    std::stringstream text;
    text << in.rdbuf();
    ++files;
    for (const auto& word : outside) {
      INFO(it->path().string());
      CHECK(text.str().find(word) == std::string::npos);
    }
  }
  CHECK(files > 100);
}

TEST_CASE("no test name holds a semicolon, which CMake would split into names matching no test",
          "[repository]") {
  // ctest learns the names from the binary's list; CMake splits a list at ';', and each
  // half then ran nothing (and passed) until -w NoTests made that a failure.
  std::size_t found = 0;
  for (const auto& entry :
       std::filesystem::recursive_directory_iterator(std::filesystem::path(HEARSAY_SOURCE_DIR) / "tests")) {
    if (entry.path().extension() != ".cpp") continue;
    std::ifstream in(entry.path());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // Definitions start a line; the name may be on the next one.
    const std::string opening = "\nTEST_CASE(";
    for (std::size_t at = text.find(opening); at != std::string::npos; at = text.find(opening, at + 1)) {
      const std::size_t open = text.find('"', at);
      const std::size_t close = open == std::string::npos ? open : text.find('"', open + 1);
      if (close == std::string::npos) continue;
      const std::string name = text.substr(open + 1, close - open - 1);
      INFO(entry.path().filename().string() << ": " << name);
      CHECK(name.find(';') == std::string::npos);
      ++found;
    }
  }
  CHECK(found > 300);  // the scan saw the tests
}

TEST_CASE("no include runs from a lower layer to a higher one (docs/ARCHITECTURE.md)", "[repository]") {
  namespace fs = std::filesystem;
  // The layers in order; a file may include its own folder's headers and lower layers'.
  // Inside gossip/ the parts are ordered too; parts of one rank do not include each other.
  const std::map<std::string, int> layer{
      {"kernels", 1}, {"model", 2}, {"gossip", 3}, {"peer", 4}, {"sim", 5}};
  const std::map<std::string, int> gossip_part{{"log", 0},       {"wire", 1},      {"topology", 1},
                                               {"keys", 2},      {"transport", 3}, {"membership", 4},
                                               {"algorithms", 4}};
  // The one arrow against the order that the document lists, until the dispatcher moves.
  const std::set<std::pair<std::string, std::string>> known{{"peer/main.cpp", "sim/sim_command.hpp"}};
  const auto part_of =
      [&](const std::string& path) {  // "gossip/wire/x.hpp" -> "wire", "gossip/log.cpp" -> "log"
        std::string rest = path.substr(path.find('/') + 1);
        std::string head = rest.substr(0, rest.find_first_of("/."));
        return head;
      };
  const fs::path root(HEARSAY_SOURCE_DIR);
  std::size_t includes = 0;
  std::vector<std::string> wrong;
  for (const auto& [folder, rank] : layer) {
    for (const auto& entry : fs::recursive_directory_iterator(root / folder)) {
      const std::string ext = entry.path().extension().string();
      if (ext != ".cpp" && ext != ".hpp" && ext != ".cu") continue;
      const std::string file = fs::relative(entry.path(), root).generic_string();
      std::ifstream in(entry.path());
      for (std::string line; std::getline(in, line);) {
        if (line.rfind("#include \"", 0) != 0) continue;
        const std::string target = line.substr(10, line.find('"', 10) - 10);
        const std::string top = target.substr(0, target.find('/'));
        ++includes;
        const auto it = layer.find(top);
        bool ok = it != layer.end() && it->second <= rank;
        if (ok && folder == "gossip" && top == "gossip") {
          const std::string from = part_of(file), to = part_of(target);
          ok = from == to || (gossip_part.count(from) && gossip_part.count(to) &&
                              gossip_part.at(to) < gossip_part.at(from));
        }
        if (!ok && !known.count({file, target})) wrong.push_back(file + " includes " + target);
      }
    }
  }
  INFO("scanned " << includes << " includes");
  CHECK(includes > 400);
  for (const auto& w : wrong) INFO(w);
  CHECK(wrong.empty());
}
