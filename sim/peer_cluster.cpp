#include "sim/peer_cluster.hpp"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <thread>

namespace hearsay::sim {

std::string ChildExit::describe() const {
  if (!signalled) return "exit " + std::to_string(code);
  const char* name = sigabbrev_np(code);
  return std::string("killed by ") + (name ? std::string("SIG") + name : "signal " + std::to_string(code));
}

long resident_high_water_kb(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) != 0) continue;
    try {
      return std::stol(line.substr(6));  // "VmHWM:     62176 kB"
    } catch (const std::exception&) {
      return 0;
    }
  }
  return 0;  // gone, or a zombie (no memory left to report)
}

bool PeerCluster::wait_for(Child& child, int options) {
  int status = 0;
  if (::waitpid(child.pid, &status, options) != child.pid) return false;
  ChildExit e;
  e.signalled = WIFSIGNALED(status);
  e.code = e.signalled ? WTERMSIG(status) : WEXITSTATUS(status);
  e.peak_rss_kb = child.peak_rss_kb;
  e.at = std::chrono::steady_clock::now();
  child.exit = e;
  return true;
}

PeerCluster::PeerCluster(int peers) : children_(static_cast<std::size_t>(peers)) {}

PeerCluster::~PeerCluster() {
  try {
    stop_all(std::chrono::seconds(10));
  } catch (...) {
    // Nothing sensible to do here; the children die with us anyway (PR_SET_PDEATHSIG).
  }
}

void PeerCluster::start(int rank, const std::vector<std::string>& argv, const std::filesystem::path& log) {
  Child& child = children_.at(static_cast<std::size_t>(rank));
  if (child.pid > 0 && !child.exit) throw std::logic_error("rank " + std::to_string(rank) + " is running");
  if (argv.empty()) throw std::invalid_argument("start: empty argv");
  // Everything the child needs is prepared before vfork: the child shares our memory until
  // it execs, so it makes only system calls. Not fork: fork runs the process's atfork
  // handlers, and OpenBLAS's joins its thread pool, which can deadlock (a simulator hung
  // restarting a peer, in blas_thread_shutdown_, with the evaluation thread idle). vfork
  // runs none, copies nothing, and returns once the child runs its own program, so that
  // no memory sample sees a copy of this process.
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot open " + log.string() + ": " + std::strerror(errno));
  const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = ::getpid();
  const pid_t pid = ::vfork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the simulator died before prctl
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
    if (null >= 0) ::dup2(null, STDIN_FILENO);
    ::execv(args[0], args.data());
    const char* why = ::strerrordesc_np(errno);  // a constant string: no locale, no allocation
    ::write(STDERR_FILENO, "error: cannot run ", 18);
    ::write(STDERR_FILENO, args[0], std::strlen(args[0]));
    ::write(STDERR_FILENO, ": ", 2);
    if (why) ::write(STDERR_FILENO, why, std::strlen(why));
    ::write(STDERR_FILENO, "\n", 1);
    ::_exit(127);
  }
  const int err = errno;
  ::close(fd);
  if (null >= 0) ::close(null);
  if (pid < 0)
    throw std::runtime_error("cannot start peer " + std::to_string(rank) + ": vfork: " + std::strerror(err));
  child.pid = pid;
  child.exit.reset();  // peak_rss_kb carries on: a restarted rank's peak is that of all its runs
}

void PeerCluster::signal(int rank, int sig) {
  const Child& child = children_.at(static_cast<std::size_t>(rank));
  if (child.pid > 0 && !child.exit) ::kill(child.pid, sig);
}

std::vector<int> PeerCluster::reap() {
  std::vector<int> ended;
  for (std::size_t r = 0; r < children_.size(); ++r) {
    Child& child = children_[r];
    if (child.pid <= 0 || child.exit) continue;
    child.peak_rss_kb = std::max(child.peak_rss_kb, resident_high_water_kb(child.pid));
    if (!wait_for(child, WNOHANG)) continue;
    ended.push_back(static_cast<int>(r));
  }
  return ended;
}

bool PeerCluster::running(int rank) const {
  const Child& child = children_.at(static_cast<std::size_t>(rank));
  return child.pid > 0 && !child.exit;
}

int PeerCluster::running_count() const {
  int n = 0;
  for (std::size_t r = 0; r < children_.size(); ++r) n += running(static_cast<int>(r)) ? 1 : 0;
  return n;
}

const std::optional<ChildExit>& PeerCluster::exit_of(int rank) const {
  return children_.at(static_cast<std::size_t>(rank)).exit;
}

long PeerCluster::peak_rss_kb(int rank) const {
  return children_.at(static_cast<std::size_t>(rank)).peak_rss_kb;
}

pid_t PeerCluster::pid_of(int rank) const { return children_.at(static_cast<std::size_t>(rank)).pid; }

void PeerCluster::stop_all(std::chrono::milliseconds grace) {
  reap();
  if (running_count() == 0) return;
  for (std::size_t r = 0; r < children_.size(); ++r) signal(static_cast<int>(r), SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  // Polling wait4 every 20 ms: children have no other way to tell us they ended that
  // works without a SIGCHLD handler, which would be the caller's business.
  while (running_count() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    reap();
  }
  for (std::size_t r = 0; r < children_.size(); ++r) signal(static_cast<int>(r), SIGKILL);
  for (Child& child : children_)
    if (child.pid > 0 && !child.exit) wait_for(child, 0);
}

}  // namespace hearsay::sim
