// ExternalEvaluator: a script's own evaluation, over two pipes (external_evaluator.hpp).
#include "sim/external_evaluator.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>
#include <vector>

#include "base/log.hpp"
#include "model/zoo.hpp"
#include "sim/peer_record.hpp"
#include "sim/peer_setup.hpp"

namespace hearsay::sim {

namespace {

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

ExternalEvaluator::ExternalEvaluator(const std::string& command, const std::vector<std::string>& args,
                                     const std::filesystem::path& log, std::chrono::seconds timeout)
    : log_(log) {
  int down[2], up[2];  // down: simulator -> evaluator; up: evaluator -> simulator
  if (::pipe2(down, O_CLOEXEC) != 0)
    throw std::runtime_error("evaluator: pipe: " + std::string(std::strerror(errno)));
  if (::pipe2(up, O_CLOEXEC) != 0) {
    ::close(down[0]);
    ::close(down[1]);
    throw std::runtime_error("evaluator: pipe: " + std::string(std::strerror(errno)));
  }
  const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  // Everything the child needs is built before fork: it only calls async-signal-safe functions.
  const std::string variable = "HEARSAY_EVALUATOR=" + std::to_string(down[0]) + ":" + std::to_string(up[1]);
  const std::string script = "exec " + command + " \"$@\"";
  std::vector<std::string> env_text;
  for (char** e = environ; *e != nullptr; ++e)
    if (std::strncmp(*e, "HEARSAY_EVALUATOR=", 18) != 0) env_text.emplace_back(*e);
  env_text.push_back(variable);
  std::vector<char*> envp;
  for (auto& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<const char*> argv{"/bin/sh", "-c", script.c_str(), "evaluator"};
  for (const auto& a : args) argv.push_back(a.c_str());
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    // The two pipe ends the script uses stay open across exec; the others close.
    ::fcntl(down[0], F_SETFD, 0);
    ::fcntl(up[1], F_SETFD, 0);
    if (out >= 0) {
      ::dup2(out, STDOUT_FILENO);
      ::dup2(out, STDERR_FILENO);
    }
    ::execve("/bin/sh", const_cast<char**>(argv.data()), envp.data());
    ::_exit(127);
  }
  const int fork_errno = errno;
  ::close(down[0]);
  ::close(up[1]);
  if (out >= 0) ::close(out);
  to_ = down[1];
  from_ = up[0];
  if (pid_ < 0) {
    close_fd(to_);
    close_fd(from_);
    throw std::runtime_error("evaluator: fork: " + std::string(std::strerror(fork_errno)));
  }
  // A script that fails its handshake does not outlive the error.
  try {
    read_handshake(command, timeout);
  } catch (...) {
    end_script();
    throw;
  }
}

void ExternalEvaluator::read_handshake(const std::string& command, std::chrono::seconds timeout) {
  // Its first line, within the timeout (importing torch and loading a test set takes seconds).
  std::string line;
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(give_up - std::chrono::steady_clock::now());
    pollfd p{from_, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) == 0)
      throw std::runtime_error("the evaluator (" + command + ") said nothing within " +
                               std::to_string(timeout.count()) + " s: " + last_error_line(log_));
    char c;
    const ssize_t n = ::read(from_, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::string why = last_error_line(log_);
      throw std::runtime_error("the evaluator (" + command + ") ended before saying what it evaluates" +
                               (why.empty() ? std::string("") : ": " + why));
    }
    if (c == '\n') break;
    line += c;
    if (line.size() > 4096) throw std::runtime_error("the evaluator's first line is not its handshake");
  }
  try {
    const auto j = nlohmann::json::parse(line);
    fingerprint_ = j.at("fingerprint").get<std::string>();
    count_ = j.at("count").get<std::int64_t>();
  } catch (const std::exception& e) {
    throw std::runtime_error("the evaluator's first line is not {\"fingerprint\", \"count\"}: " + line);
  }
  if (count_ < 1) throw std::runtime_error("the evaluator's model has no parameters");
}

ExternalEvaluator::~ExternalEvaluator() { end_script(); }

void ExternalEvaluator::end_script() noexcept {
  close_fd(to_);
  close_fd(from_);
  if (pid_ <= 0) return;
  // Its input ended: it exits. A second's grace, then it is killed.
  for (int i = 0; i < 100; ++i) {
    if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

void ExternalEvaluator::write_all(const void* data, std::size_t bytes) {
  // An evaluator that died is an error here, not a SIGPIPE that ends the simulator: the
  // signal is blocked on this thread while it writes, and one it raised is taken back.
  sigset_t pipe_signal, before;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe_signal, &before);
  const auto* p = static_cast<const char*>(data);
  bool failed = false;
  while (bytes > 0) {
    const ssize_t n = ::write(to_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      failed = true;
      break;
    }
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
  const timespec now{0, 0};
  if (failed) ::sigtimedwait(&pipe_signal, nullptr, &now);
  ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
  if (failed) throw std::runtime_error("the evaluator ended: " + last_error_line(log_));
}

void ExternalEvaluator::read_all(void* data, std::size_t bytes) {
  auto* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::read(from_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error("the evaluator ended: " + last_error_line(log_));
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

std::pair<double, double> ExternalEvaluator::evaluate(std::span<const float> state) {
  if (static_cast<std::int64_t>(state.size()) != count_)
    throw std::invalid_argument("evaluator: " + std::to_string(state.size()) + " values for a model of " +
                                std::to_string(count_));
  if (to_ < 0) throw std::runtime_error("the evaluator failed before");
  try {
    const auto n = static_cast<std::uint64_t>(count_);  // little-endian: x86-64 and arm64 alike
    write_all(&n, sizeof n);
    write_all(state.data(), state.size_bytes());
    double answer[2];
    read_all(answer, sizeof answer);
    return {answer[0], answer[1]};
  } catch (...) {
    close_fd(to_);  // a half-written request cannot be taken back
    throw;
  }
}

// How long a script may take to say what it evaluates: importing torch and loading a test
// set take seconds on a busy box.
constexpr auto kEvaluatorTimeout = std::chrono::seconds(120);

// With --peer-command, the script's evaluator when its model is none of hearsay's; null
// when it is --model (hearsay evaluates it natively, as it does native peers) or there is
// no peer command. The script gets rank 0's flags (it reads --data, --device and the rest
// as its peers do). std::runtime_error when the evaluator does not start: a script that
// cannot evaluate its model cannot be compared.
std::shared_ptr<ExternalEvaluator> start_script_evaluator(const SimConfig& cfg, const std::string& algo,
                                                          std::uint64_t seed, const std::string& run_id,
                                                          const std::filesystem::path& dir) {
  if (cfg.peer_command.empty()) return nullptr;
  const std::filesystem::path log = dir / "evaluator.log";
  std::filesystem::remove(log);
  auto flags = peer_arguments(cfg, {}, "", algo, 0, seed, run_id, dir);
  flags.erase(flags.begin(), flags.begin() + static_cast<std::ptrdiff_t>(peer_program(cfg, "").size()));
  try {
    auto evaluator = std::make_shared<ExternalEvaluator>(cfg.peer_command, flags, log, kEvaluatorTimeout);
    if (evaluator->fingerprint() == make_model(cfg.training.model)->fingerprint()) return nullptr;
    std::fprintf(stderr,
                 "hearsay sim: the peers' model (%s) is none of hearsay's: the script evaluates it "
                 "(hearsay.torch.evaluate_with; its output in %s)\n",
                 evaluator->fingerprint().c_str(), log.c_str());
    return evaluator;
  } catch (const std::runtime_error& e) {
    // A script without evaluate_with is evaluated as --model: right when its module is that
    // model (its peers' fingerprints then agree with the observer's), and its peers say so otherwise.
    logging::warn(std::string("sim: ") + e.what() + "; evaluating the peers as --model " +
                  cfg.training.model);
    return nullptr;
  }
}

}  // namespace hearsay::sim
