#include "peer/run_output.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <utility>

namespace hearsay {

int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return 1;
}

JsonLinesFile::JsonLinesFile(const std::string& path) : path_(path) {
  if (path.empty()) return;
  struct stat st {};
  if (path.rfind("/dev/", 0) == 0 || (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))) {
    // A pipe, a terminal, /dev/stdout (whatever it points to): appended to as it is, never
    // locked, truncated or removed.
    stream_fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    if (stream_fd_ < 0)
      throw std::runtime_error("cannot open metrics file '" + path + "' for writing: " + std::strerror(errno));
    return;
  }
  try {
    lock_ = FileLock::try_lock(path);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error("cannot open metrics file '" + path + "' for writing: " + e.what());
  }
  if (!lock_)
    throw std::runtime_error("metrics file '" + path +
                             "' is being written by another running hearsay process (a peer or train): give "
                             "each its own file (hearsay peer expands {rank} and {id}: --metrics "
                             "'metrics-{rank}.jsonl'; scripts/launch does it for you)");
  if (::ftruncate(lock_->fd(), 0) != 0)
    throw std::runtime_error("cannot truncate metrics file '" + path + "': " + std::strerror(errno));
}

JsonLinesFile::~JsonLinesFile() {
  if (stream_fd_ >= 0) ::close(stream_fd_);
  if (!lock_ || written_) return;
  std::error_code ignored;
  std::filesystem::remove(path_, ignored);
}

void JsonLinesFile::write(const nlohmann::json& record) {
  const int fd = lock_ ? lock_->fd() : stream_fd_;
  if (fd < 0) return;
  const std::string line = record.dump() + '\n';
  // O_APPEND is not set: the descriptor's offset moves on with each whole line.
  std::size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // Training goes on without its metrics rather than stopping on a full disk.
      std::fprintf(stderr, "cannot write metrics file '%s': %s; no more metrics are written\n", path_.c_str(),
                   std::strerror(errno));
      if (stream_fd_ >= 0) ::close(std::exchange(stream_fd_, -1));
      lock_.reset();
      written_ = true;  // what was written stays
      return;
    }
    done += static_cast<std::size_t>(n);
  }
  written_ = true;
}

ProgressLine::ProgressLine(double interval_s) : tty_(isatty(STDERR_FILENO) != 0) {
  interval_s_ = interval_s >= 0 ? interval_s : (tty_ ? 0.25 : 10.0);
}

void ProgressLine::update(const std::string& text, bool force) {
  if (!force && std::chrono::duration<double>(Clock::now() - last_).count() < interval_s_) return;
  last_ = Clock::now();
  if (tty_) {
    std::fprintf(stderr, "\r\033[K%s", text.c_str());
  } else {
    std::fprintf(stderr, "%s\n", text.c_str());
  }
  std::fflush(stderr);
  shown_ = true;
}

void ProgressLine::clear() {
  if (tty_ && shown_) std::fprintf(stderr, "\r\033[K");
  shown_ = false;
}

}  // namespace hearsay
