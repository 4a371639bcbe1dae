// What several test files need: temporary paths that clean up after themselves, reading a
// file whole, and running the real `hearsay` binary (HEARSAY_BINARY) as a user would.
#pragma once
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

// Ends the running TEST_CASE as skipped, saying why. Catch2 v2 has no SKIP: the marker in
// the output makes ctest report the test as skipped (SKIP_REGULAR_EXPRESSION in
// tests/CMakeLists.txt), never as passed, and scripts/test lists the reasons. Only for what
// this machine cannot test (a GPU host has nothing to refuse); what scripts/setup installs
// (data, python3) is required, not skipped.
#define HEARSAY_SKIP(why)                    \
  do {                                       \
    WARN("hearsay-test-skipped: " << why);   \
    return;                                  \
  } while (false)

namespace hearsay::testing {

// A path under the system temp directory, unique to this process and call, not created;
// removed with whatever was created there on destruction.
class TempPath {
 public:
  explicit TempPath(const std::string& suffix = "") {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("hearsay_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + suffix);
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ~TempPath() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempPath(const TempPath&) = delete;
  TempPath& operator=(const TempPath&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }
  // A file inside this path (as a directory).
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

struct CliResult {
  int status = -1;  // exit code, or -1 if it did not exit normally
  std::string out, err;
  std::string all() const { return out + err; }
};

// Starts HEARSAY_BINARY with args, stdin from /dev/null and stdout and stderr to the
// given files (appended when `append`, else truncated). The environment is ours without
// HEARSAY_DATA, so that the developer's own setting cannot change the outcome, plus `env`
// ("NAME=value" entries). Returns the child's pid; REQUIREs that it started.
inline pid_t spawn_hearsay(const std::vector<std::string>& args, const std::string& out_path,
                           const std::string& err_path, const std::vector<std::string>& env = {},
                           bool append = false) {
  std::vector<std::string> argv_s{HEARSAY_BINARY};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "HEARSAY_DATA=", 13) != 0) env_s.emplace_back(*e);
  env_s.insert(env_s.end(), env.begin(), env.end());
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);

  const int mode = O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path.c_str(), mode, 0600);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(), mode, 0600);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, HEARSAY_BINARY, &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  REQUIRE(rc == 0);
  return pid;
}

// Runs HEARSAY_BINARY with args to its end (spawn_hearsay); stdout and stderr go to temp
// files (no pipe to drain, so no deadlock on long output).
inline CliResult run_hearsay(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  TempPath out(".out"), err(".err");
  const pid_t pid = spawn_hearsay(args, out.str(), err.str(), env);
  int wstatus = 0;
  REQUIRE(::waitpid(pid, &wstatus, 0) == pid);
  CliResult r;
  r.status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1;
  r.out = read_file(out.path());
  r.err = read_file(err.path());
  return r;
}

}  // namespace hearsay::testing
