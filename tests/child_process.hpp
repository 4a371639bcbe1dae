// A `hearsay` process running in the background for as long as a test needs it: started
// with posix_spawn (stdout and stderr to files), signalled, waited for with a deadline,
// and killed with SIGKILL by the destructor if the test left it running.
#pragma once
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "peer/ready_file.hpp"
#include "test_support.hpp"

namespace hearsay::testing {

class ChildProcess {
 public:
  using Clock = std::chrono::steady_clock;

  // Runs HEARSAY_BINARY with args, stdout to out_path and stderr to err_path (appended,
  // so a restarted peer keeps one log).
  ChildProcess(const std::vector<std::string>& args, const std::string& out_path, const std::string& err_path)
      : out_path_(out_path),
        err_path_(err_path),
        pid_(spawn_hearsay(args, out_path, err_path, {}, /*append=*/true)) {}
  ~ChildProcess() {
    if (running()) {
      ::kill(pid_, SIGKILL);
      (void)wait_for(std::chrono::seconds(10));
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  bool running() const { return !status_.has_value(); }
  void signal(int sig) const {
    if (running()) ::kill(pid_, sig);
  }

  // The exit code (-1 for a death by signal) once the process ended, or nullopt if it
  // is still running after `timeout`. Polls waitpid: a child's end has no other
  // portable wait with a timeout.
  std::optional<int> wait_for(Clock::duration timeout) {
    const auto deadline = Clock::now() + timeout;
    while (!status_) {
      int wstatus = 0;
      const pid_t r = ::waitpid(pid_, &wstatus, WNOHANG);
      if (r == pid_) {
        status_ = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1;
        if (WIFSIGNALED(wstatus)) killed_by_ = WTERMSIG(wstatus);
        break;
      }
      if (Clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return status_;
  }

  // The signal it died of once wait_for saw it end, else 0.
  int killed_by() const { return killed_by_; }

  std::string out() const { return read_file(out_path_); }
  std::string err() const { return read_file(err_path_); }
  const std::string& err_path() const { return err_path_; }

 private:
  std::string out_path_, err_path_;
  pid_t pid_;
  std::optional<int> status_;
  int killed_by_ = 0;
};

// Waits until check() is true (polled every 20 ms) or the timeout passes; returns the
// last result. For conditions on files other processes write.
template <class Check>
bool eventually(Check check, std::chrono::steady_clock::duration timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (check()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// What the peer `process` wrote to its --ready-file `path` once it listened (its address,
// its --http port); std::runtime_error naming `who` and its log (stderr) when it exits first
// or writes nothing within `timeout`.
inline PeerReady await_ready(ChildProcess& process, const std::string& path, const std::string& who,
                             std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  ReadyWait wait;
  wait.who = who;
  wait.log = process.err_path();
  wait.timeout = timeout;
  wait.ended = [&process]() -> std::optional<std::string> {
    const auto status = process.wait_for(std::chrono::seconds(0));
    if (!status) return std::nullopt;
    return *status < 0 ? std::string("was killed by a signal") : "exit " + std::to_string(*status);
  };
  return await_ready_file(path, wait);
}

}  // namespace hearsay::testing
