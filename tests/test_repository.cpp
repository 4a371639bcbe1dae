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
