#include "sim/peer_record.hpp"

#include <algorithm>
#include <utility>

#include "base/crash_report.hpp"
#include "peer/peer_config.hpp"

namespace hearsay::sim {

void MetricsTail::read_new(const std::filesystem::path& path,
                           const std::function<void(const nlohmann::json&)>& each) {
  // A restarted peer truncates its file and writes it again from the start: a file now
  // shorter than what was read of it is read again from its start, as a new life.
  std::error_code error;
  const auto size = std::filesystem::file_size(path, error);
  if (file_.is_open() && !error && size < read_) {
    file_.close();
    partial_.clear();
    read_ = 0;
    earlier_lives_bytes_ += std::exchange(bytes_sent_, 0.0);
  }
  if (!file_.is_open()) {
    file_.open(path);
    if (!file_.is_open()) return;
  }
  file_.clear();  // past EOF last time
  std::string chunk;
  char buf[65536];
  while (file_.read(buf, sizeof buf) || file_.gcount() > 0)
    chunk.append(buf, static_cast<std::size_t>(file_.gcount()));
  read_ += chunk.size();
  partial_ += chunk;
  std::size_t start = 0;
  for (std::size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1) {
    const auto rec = nlohmann::json::parse(partial_.substr(start, nl - start), nullptr, false);
    if (rec.is_discarded() || !rec.is_object()) continue;
    each(rec);
    if (rec.value("type", "") == "start") earlier_lives_bytes_ += std::exchange(bytes_sent_, 0.0);
    if (rec.value("type", "") == "metrics") {
      step_ = std::max<std::int64_t>(step_, rec.value("step", std::int64_t{0}));
      bytes_sent_ = std::max(bytes_sent_, rec.value("bytes_sent", 0.0));
    }
  }
  partial_.erase(0, start);
}

std::string last_error_line(const std::filesystem::path& log) {
  std::ifstream in(log);
  std::string line, fatal, error, last;
  while (std::getline(in, line)) {
    if (line.rfind("hearsay peer: ", 0) == 0) fatal = line.substr(14);
    // A crash (base/crash_report.hpp): the signal and where, the stack left in the log.
    if (line.starts_with(kCrashReportPrefix)) {
      const std::string what = line.substr(kCrashReportPrefix.size());
      fatal = "crashed: " + what.substr(0, what.find(';')) + "; its stack is in " + log.string();
      break;
    }
    // A Python peer (--peer-command) that died of an exception: its traceback's last line,
    // "RuntimeError: all-reduce lost rank5 ...", carries hearsay's own message.
    if (const auto colon = line.find("Error: ");
        colon != std::string::npos && colon > 0 && line.find_first_of(" \t") > colon)
      fatal = line;
    if (line.find("error") != std::string::npos) error = line;
    // A usage error (exit 2) is the flag parser's line, followed by hints to run --help.
    if (!line.empty() && line.rfind("Run ", 0) != 0) last = line;
  }
  std::string found = !fatal.empty() ? fatal : !error.empty() ? error : last;
  if (found.size() > 300) found = found.substr(0, 300) + "...";
  return found;
}

std::string crash_report_in(const std::filesystem::path& log) {
  constexpr int kMaxLines = 80;  // the report's own frames are at most 64
  std::ifstream in(log);
  std::string line, report;
  int lines = 0;
  while (std::getline(in, line)) {
    if (report.empty() && !line.starts_with(kCrashReportPrefix)) continue;
    report += line + "\n";
    if (line.starts_with(kCrashReportLastLine) || ++lines >= kMaxLines) break;
  }
  return report;
}

PeerRecord::PeerRecord(int rank, std::vector<std::string> argv, const std::filesystem::path& run_dir)
    : rank(rank), id(rank_peer_id(rank)), argv(std::move(argv)), files(run_dir, rank) {}

}  // namespace hearsay::sim
