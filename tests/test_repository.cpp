// The repository as a user clones it: its documents and code point at nothing outside it.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

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
