// The crash report on threads other than main (base/crash_report.hpp): a thread that
// hearsay names gets an alternate signal stack, so its stack overflow is reported, and a
// thread that keeps signals off its polls still takes those of a fault. Each crash runs
// in a forked child, whose stderr is a file read afterwards.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/crash_report.hpp"
#include "base/thread_name.hpp"
#include "test_support.hpp"

namespace {

volatile bool keep_recursing = true;

// Overflows the stack: each call holds a page that the compiler cannot drop.
[[gnu::noinline]] int recurse(int depth) {
  volatile char page[4096];
  page[0] = static_cast<char>(depth);
  if (!keep_recursing) return depth;
  return recurse(depth + 1) + page[0];
}

struct Death {
  int signal = 0;  // 0: the child did not die of a signal
  std::string stderr_text;
};

// Runs `body` in a forked child with the crash report installed and stderr in a file.
template <typename Body>
Death run_child(const std::filesystem::path& err, Body body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ::dup2(fd, STDERR_FILENO) < 0) ::_exit(3);
    const struct rlimit no_core = {0, 0};
    (void)::setrlimit(RLIMIT_CORE, &no_core);
    hearsay::install_crash_report();
    body();
    ::_exit(0);
  }
  int status = 0;
  Death death;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid) return death;
  if (WIFSIGNALED(status)) death.signal = WTERMSIG(status);
  std::ifstream in(err);
  std::stringstream text;
  text << in.rdbuf();
  death.stderr_text = text.str();
  return death;
}

}  // namespace

TEST_CASE("crash report: a stack overflow on a named thread is reported from its own signal stack",
          "[crash]") {
  hearsay::testing::TempPath dir;
  std::filesystem::create_directories(dir.path());
  const Death death = run_child(dir.path() / "err.txt", [] {
    std::thread([] {
      hearsay::name_this_thread("hs-deep");
      (void)recurse(0);
    }).join();
  });
  INFO(death.stderr_text);
  CHECK(death.signal == SIGSEGV);
  CHECK_THAT(death.stderr_text,
             Catch::Contains("hearsay: crashed: SIGSEGV (invalid memory access) at address 0x") &&
                 Catch::Contains(" on thread 'hs-deep'; its stack:\n"));
}

TEST_CASE("crash report: a thread that blocks other signals still reports its fault", "[crash]") {
  hearsay::testing::TempPath dir;
  std::filesystem::create_directories(dir.path());
  const Death death = run_child(dir.path() / "err.txt", [] {
    std::thread([] {
      hearsay::name_this_thread("hs-quiet");
      hearsay::block_async_signals_in_this_thread();
      sigset_t blocked;
      ::pthread_sigmask(SIG_BLOCK, nullptr, &blocked);
      if (sigismember(&blocked, SIGINT) != 1 || sigismember(&blocked, SIGTERM) != 1) ::_exit(4);
      // A fault, not a kill: a load from the first page, at an address the compiler
      // cannot see (so it emits the load, not a trap of its own).
      volatile std::uintptr_t nowhere = 16;
      (void)*reinterpret_cast<volatile int*>(nowhere);
    }).join();
  });
  INFO(death.stderr_text);
  CHECK(death.signal == SIGSEGV);
  CHECK_THAT(death.stderr_text,
             Catch::Contains(
                 "hearsay: crashed: SIGSEGV (invalid memory access) at address 0x10 on thread 'hs-quiet'"));
}
