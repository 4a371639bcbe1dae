#include "peer/run_output.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

namespace hearsay {

int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return 1;
}

JsonLinesFile::JsonLinesFile(const std::string& path) : path_(path) {
  if (path.empty()) return;
  file_.open(path, std::ios::out | std::ios::trunc);
  if (!file_) throw std::runtime_error("cannot open metrics file '" + path + "' for writing");
}

JsonLinesFile::~JsonLinesFile() {
  if (!file_.is_open() || written_) return;
  file_.close();
  std::error_code ignored;
  std::filesystem::remove(path_, ignored);
}

void JsonLinesFile::write(const nlohmann::json& record) {
  if (!file_.is_open()) return;
  file_ << record.dump() << '\n';
  file_.flush();
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
