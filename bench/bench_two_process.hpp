// A receiver in a forked child process, for transport benchmarks that must not share
// one process (one heap, one set of ZeroMQ I/O threads) between sender and receiver, as
// peers never do. The child reports its address, then one timestamp per message it
// holds; std::chrono::steady_clock is CLOCK_MONOTONIC on Linux, one clock for every
// process on the machine, so the parent subtracts its own send time from it.
#pragma once
#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "bench/bench_util.hpp"

namespace hearsay::bench {

// What the child runs: it writes with the ChildChannel, returns its exit status.
class ChildChannel {
 public:
  explicit ChildChannel(int fd) : fd_(fd) {}
  void send_address(const std::string& address) const {
    const auto size = static_cast<std::uint32_t>(address.size());
    write_all(&size, sizeof size);
    write_all(address.data(), address.size());
  }
  // "I hold message r now."
  void send_timestamp() const {
    const std::int64_t ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
    write_all(&ns, sizeof ns);
  }

 private:
  void write_all(const void* data, std::size_t size) const {
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
      const ssize_t n = ::write(fd_, p, size);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw std::runtime_error("receiver process: the pipe to the sender broke");
      p += n;
      size -= static_cast<std::size_t>(n);
    }
  }
  int fd_;
};

class ReceiverProcess {
 public:
  // Forks; the child runs body(channel) and leaves with _exit (no atexit handlers or
  // static destructors of the parent's run twice). Fork before this process starts any
  // threads (ZeroMQ contexts included): only the forking thread exists in the child.
  template <class Body>
  explicit ReceiverProcess(Body&& body) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("bench: pipe() failed");
    std::fflush(nullptr);
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("bench: fork() failed");
    if (pid_ == 0) {
      ::close(fds[0]);
      int status = 1;
      try {
        status = body(ChildChannel(fds[1]));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "receiver process: %s\n", e.what());
      }
      ::_exit(status);
    }
    ::close(fds[1]);
    fd_ = fds[0];
  }
  ReceiverProcess(const ReceiverProcess&) = delete;
  ReceiverProcess& operator=(const ReceiverProcess&) = delete;

  ~ReceiverProcess() {
    ::close(fd_);
    int status = 0;
    // The child ends by itself after its last message; one that hangs is not waited on.
    if (::waitpid(pid_, &status, WNOHANG) == 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
    }
  }

  std::string read_address() {
    std::uint32_t size = 0;
    read_all(&size, sizeof size);
    if (size > 4096) throw std::runtime_error("bench: receiver process sent a malformed address");
    std::string address(size, '\0');
    read_all(address.data(), size);
    return address;
  }

  Clock::time_point read_timestamp() {
    std::int64_t ns = 0;
    read_all(&ns, sizeof ns);
    return Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(ns)));
  }

  // Waits for the child to leave; its exit status (non-zero: it failed).
  int wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  }

 private:
  void read_all(void* data, std::size_t size) {
    char* p = static_cast<char*>(data);
    while (size > 0) {
      pollfd pfd{fd_, POLLIN, 0};
      const int ready = ::poll(&pfd, 1, 60'000);
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) throw std::runtime_error("bench: the receiver process said nothing for 60 s");
      const ssize_t n = ::read(fd_, p, size);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw std::runtime_error("bench: the receiver process exited early (its error is above)");
      p += n;
      size -= static_cast<std::size_t>(n);
    }
  }
  pid_t pid_ = -1;
  int fd_ = -1;
};

}  // namespace hearsay::bench
