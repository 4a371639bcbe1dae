// A small logging facility shared by the gossip library and the peer process:
// levels, one timestamped line per call on stderr, thread-safe, and a replaceable
// sink so tests (or a metrics exporter) can capture lines instead.
//
// The initial level comes from the environment variable HEARSAY_LOG
// (debug | info | warn | error | off); without it the level is info.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hearsay::logging {

enum class Level { debug = 0, info = 1, warn = 2, error = 3, off = 4 };
std::string_view to_string(Level level);
// "debug", "info", "warn" (or "warning"), "error", "off"; nullopt for anything else.
std::optional<Level> parse_level(std::string_view text);

void set_level(Level level);
Level level();
// Whether a line at this level would be written: lets callers skip building messages.
bool enabled(Level level);

// Receives every line that passes the level filter, without the timestamp. Called with
// the logger's lock held, so lines never interleave; a sink must not log itself.
using Sink = std::function<void(Level level, std::string_view message)>;
// Replaces the sink; an empty Sink restores the default (timestamped lines on stderr).
// Returns the previous sink (empty when it was the default).
Sink set_sink(Sink sink);

void write(Level level, std::string_view message);
inline void debug(std::string_view message) { write(Level::debug, message); }
inline void info(std::string_view message) { write(Level::info, message); }
inline void warn(std::string_view message) { write(Level::warn, message); }
inline void error(std::string_view message) { write(Level::error, message); }

// Collects lines for as long as it lives (tests), then puts the previous sink and level
// back. Captures every level from `min_level` up, whatever the global level was.
class CapturedLines {
 public:
  struct Line {
    Level level;
    std::string message;
  };
  explicit CapturedLines(Level min_level = Level::debug);
  ~CapturedLines();
  CapturedLines(const CapturedLines&) = delete;
  CapturedLines& operator=(const CapturedLines&) = delete;

  // A copy of the lines so far (thread-safe).
  std::vector<Line> lines() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
  Sink previous_sink_;
  Level previous_level_;
};

}  // namespace hearsay::logging
