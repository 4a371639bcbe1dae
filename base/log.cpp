#include "base/log.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>

namespace hearsay::logging {
namespace {

Level initial_level() {
  const char* env = std::getenv("HEARSAY_LOG");
  if (env == nullptr) return Level::info;
  return parse_level(env).value_or(Level::info);
}

// One mutex for the sink and the writes: lines from different threads never interleave.
struct Logger {
  std::mutex mutex;
  Sink sink;
  std::atomic<Level> level{initial_level()};
};

Logger& logger() {
  static Logger instance;  // constructed on first use, so logging works from static initialisers
  return instance;
}

// "2024-05-01T12:34:56.789Z" (UTC, milliseconds).
void write_stderr(Level level, std::string_view message) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &utc);
  std::fprintf(stderr, "%s.%03dZ %-5s %.*s\n", stamp, static_cast<int>(millis), to_string(level).data(),
               static_cast<int>(message.size()), message.data());
}

}  // namespace

std::string_view to_string(Level level) {
  switch (level) {
    case Level::debug:
      return "debug";
    case Level::info:
      return "info";
    case Level::warn:
      return "warn";
    case Level::error:
      return "error";
    case Level::off:
      return "off";
  }
  return "unknown";
}

std::optional<Level> parse_level(std::string_view text) {
  if (text == "debug") return Level::debug;
  if (text == "info") return Level::info;
  if (text == "warn" || text == "warning") return Level::warn;
  if (text == "error") return Level::error;
  if (text == "off") return Level::off;
  return std::nullopt;
}

void set_level(Level level) { logger().level.store(level, std::memory_order_relaxed); }
Level level() { return logger().level.load(std::memory_order_relaxed); }
bool enabled(Level l) { return l != Level::off && l >= level(); }

Sink set_sink(Sink sink) {
  Logger& log = logger();
  std::lock_guard lock(log.mutex);
  std::swap(log.sink, sink);
  return sink;
}

void write(Level l, std::string_view message) {
  if (!enabled(l)) return;
  Logger& log = logger();
  std::lock_guard lock(log.mutex);
  if (log.sink)
    log.sink(l, message);
  else
    write_stderr(l, message);
}

struct CapturedLines::State {
  mutable std::mutex mutex;
  std::vector<Line> lines;
};

CapturedLines::CapturedLines(Level min_level) : state_(std::make_shared<State>()), previous_level_(level()) {
  previous_sink_ = set_sink([state = state_](Level l, std::string_view message) {
    std::lock_guard lock(state->mutex);
    state->lines.push_back({l, std::string(message)});
  });
  set_level(min_level);
}

CapturedLines::~CapturedLines() {
  set_level(previous_level_);
  set_sink(std::move(previous_sink_));
}

std::vector<CapturedLines::Line> CapturedLines::lines() const {
  std::lock_guard lock(state_->mutex);
  return state_->lines;
}

}  // namespace hearsay::logging
