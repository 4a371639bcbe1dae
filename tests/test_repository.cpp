// The repository as a user clones it: its documents and code point at nothing outside it.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
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
  // The layers in order, as docs/ARCHITECTURE.md lists them: a file may include its own
  // folder's headers and lower layers'. gossip/ is two layers, network below mixing.
  const std::vector<std::pair<std::string, int>> layer{
      {"base", 0}, {"kernels", 1}, {"model", 2}, {"gossip/network", 3}, {"gossip/mixing", 4},
      {"peer", 5}, {"sim", 6},     {"app", 7},   {"python", 7}};
  // Inside the network the parts are ordered too; parts of one rank do not include each other.
  // Link emulation decorates the transport from above it; membership talks through either.
  const std::map<std::string, int> network_part{
      {"wire", 0}, {"transport", 1}, {"emulation", 2}, {"membership", 3}};
  const auto layer_of = [&](const std::string& path) -> std::optional<std::pair<std::string, int>> {
    for (const auto& [folder, rank] : layer)
      if (path.rfind(folder + "/", 0) == 0) return std::pair{folder, rank};
    return std::nullopt;
  };
  const auto network_part_of = [](const std::string& path) {  // "gossip/network/wire/x.hpp" -> "wire"
    const std::string rest = path.substr(std::string("gossip/network/").size());
    return rest.substr(0, rest.find('/'));
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
        ++includes;
        const auto to = layer_of(target);
        bool ok = to && to->second <= rank;
        if (ok && folder == "gossip/network" && to->first == folder) {
          const std::string from_part = network_part_of(file), to_part = network_part_of(target);
          ok = from_part == to_part || (network_part.count(from_part) && network_part.count(to_part) &&
                                        network_part.at(to_part) < network_part.at(from_part));
        }
        if (!ok) wrong.push_back(file + " includes " + target);
      }
    }
  }
  INFO("scanned " << includes << " includes");
  CHECK(includes > 400);
  for (const auto& w : wrong) INFO(w);
  CHECK(wrong.empty());
}

TEST_CASE("the transports know nothing of link emulation, which wraps them (gossip/network/emulation)",
          "[repository]") {
  // Built from parts, so that this file does not name them itself.
  // (The include test above keeps them from including it.)
  const std::vector<std::string> emulation_words{
      std::string("Link") + "Spec", std::string("Link") + "Emulation", std::string("Link") + "Emulator",
      std::string("Emulation") + "Counters", std::string("set_") + "blocked"};
  const std::filesystem::path transport =
      std::filesystem::path(HEARSAY_SOURCE_DIR) / "gossip" / "network" / "transport";
  std::size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(transport)) {
    std::ifstream in(entry.path());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ++files;
    for (const auto& word : emulation_words) {
      INFO(entry.path().filename().string() << " names " << word);
      CHECK(text.find(word) == std::string::npos);
    }
  }
  CHECK(files > 10);
}
