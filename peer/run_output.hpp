// What `hearsay train` and `hearsay peer` print and write while they run: the JSON-lines
// metrics file, the live progress line, and the core count a run defaults to.
#pragma once
#include <chrono>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "base/file_lock.hpp"

namespace hearsay {

// The cores this process may run on (its CPU affinity), at least 1.
int usable_cores();
// The evaluation snapshot (--snapshot-every `every` epochs) due right after step `step`, if
// any. Snapshot K is taken right after step round(K * every * steps per epoch): a fixed step
// whatever the timing, so two runs with the same seed snapshot the same state (peer
// processes and virtual peers alike). `next` is the first K not taken yet; it moves past
// those a resumed run skipped and past the one returned.
inline std::optional<std::int64_t> snapshot_due(std::int64_t& next, double every,
                                                std::int64_t steps_per_epoch, std::int64_t step) {
  if (every <= 0) return std::nullopt;
  const auto step_of = [&](std::int64_t k) {
    return static_cast<std::int64_t>(
        std::llround(static_cast<double>(k) * every * static_cast<double>(steps_per_epoch)));
  };
  while (step_of(next) < step) ++next;
  if (step_of(next) != step) return std::nullopt;
  return next++;
}
// A duration in seconds, for logs and metrics.
inline double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Appends one JSON object per line, each written whole at once, so a crash loses at most
// the line being written. An empty path writes nothing. The constructor locks the file
// (base/file_lock.hpp) and only then truncates it: a second process given the same path
// (two peers of one host, a peer and `hearsay train`) is refused with std::runtime_error
// and the first one's lines are kept. It throws std::runtime_error naming the file when
// it cannot be written either. A run that ends before its first record leaves no empty
// file behind. A path that is no regular file (a pipe, /dev/stdout) is written as it is.
class JsonLinesFile {
 public:
  explicit JsonLinesFile(const std::string& path);
  ~JsonLinesFile();
  JsonLinesFile(const JsonLinesFile&) = delete;
  JsonLinesFile& operator=(const JsonLinesFile&) = delete;
  void write(const nlohmann::json& record);

 private:
  std::string path_;
  std::optional<FileLock> lock_;  // a regular file: held for the run, this process's alone
  int stream_fd_ = -1;            // a pipe, terminal or /dev/stdout: written as it is
  bool written_ = false;
};

// The live progress line on stderr: rewritten in place on a terminal, a plain line now
// and then when stderr is a file or a pipe (CI logs, the simulator's per-peer logs).
class ProgressLine {
 public:
  // interval_s < 0: 0.25 s on a terminal, 10 s otherwise.
  explicit ProgressLine(double interval_s);
  // Shows text when the interval has passed since the last line (or always when forced).
  void update(const std::string& text, bool force = false);
  // Erases an in-place line before other output.
  void clear();

 private:
  using Clock = std::chrono::steady_clock;
  bool tty_;
  bool shown_ = false;
  double interval_s_;
  Clock::time_point last_ = Clock::now();
};

}  // namespace hearsay
