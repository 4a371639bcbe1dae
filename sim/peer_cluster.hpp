// The peer processes of one simulated run: started with fork/exec, their output in log
// files, stopped on request, and never left behind: each child dies with the simulator
// (PR_SET_DEATHSIG), and the destructor stops whatever still runs (SIGTERM, then SIGKILL).
#pragma once
#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace hearsay::sim {

// The high-water mark of a live process's resident set (VmHWM in /proc/PID/status), in KiB;
// 0 when it cannot be read (the process ended). Not getrusage's ru_maxrss: Linux carries
// the parent's high-water mark across fork and exec into it, so every peer of a simulator
// that holds the test set would seem to take at least the simulator's memory.
long resident_high_water_kb(pid_t pid);

// How a child ended.
struct ChildExit {
  bool signalled = false;        // killed by a signal (then `code` is the signal number)
  int code = 0;                  // exit status, or the signal
  long peak_rss_kb = 0;          // its largest resident set seen (VmHWM, sampled by reap())
  std::chrono::steady_clock::time_point at{};  // when it was reaped
  std::string describe() const;  // "exit 0", "exit 1", "killed by SIGKILL"
};

class PeerCluster {
 public:
  // argv of rank r (argv[0] is the executable) is given to start().
  explicit PeerCluster(int peers);
  // Stops every child still running (SIGTERM, up to 10 s, then SIGKILL). Never throws.
  ~PeerCluster();
  PeerCluster(const PeerCluster&) = delete;
  PeerCluster& operator=(const PeerCluster&) = delete;

  // Starts rank r with argv, its stdout and stderr appended to `log`. Throws
  // std::runtime_error when it cannot (fork or the log file fail; an executable that
  // cannot be run shows as exit 127 with the reason in the log).
  void start(int rank, const std::vector<std::string>& argv, const std::filesystem::path& log);
  // Sends sig to rank r if it runs.
  void signal(int rank, int sig);
  // Reaps children that ended; returns the ranks that did since the last call. Also samples
  // the peak memory of those still running (call it often: growth after the last sample is
  // not seen).
  std::vector<int> reap();
  // The largest resident set of rank r seen so far, over all its starts, in KiB (0 before
  // the first sample).
  long peak_rss_kb(int rank) const;
  bool running(int rank) const;
  int running_count() const;
  // How rank r ended last (nullopt while it runs or before it started).
  const std::optional<ChildExit>& exit_of(int rank) const;
  pid_t pid_of(int rank) const;
  // SIGTERM to all, up to `grace` for them to end, then SIGKILL; reaps them.
  void stop_all(std::chrono::milliseconds grace);

 private:
  struct Child {
    pid_t pid = -1;
    std::optional<ChildExit> exit;
    long peak_rss_kb = 0;  // VmHWM of /proc/PID/status, the last sample
  };
  // waitpid with `options` (WNOHANG or 0); on success records how the child ended.
  static bool wait_for(Child& child, int options);

  std::vector<Child> children_;
};

}  // namespace hearsay::sim
