// The screen of `hearsay watch`: a header (run, time, how many peers answer), one aligned
// line per peer and, below, members no target covers and warnings. Plain text, ASCII
// only, so that a line cut to the terminal's width is cut by characters; the command adds
// the colours and the cursor movements.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "peer/watch_status.hpp"
#include "peer/watch_targets.hpp"

namespace hearsay::watch {

// 512B, 12.1K, 980K, 3.40M, 1.25G (binary units).
std::string format_bytes(std::uint64_t bytes);
// `value` with printf's `format` ("%.4f"), or "-" when unset.
std::string format_optional(const std::optional<double>& value, const char* format);
// The line cut to `width` characters, the last three "..." when anything was cut
// (width 0: no limit).
std::string fit(const std::string& line, std::size_t width);

enum class Tone { plain, title, warn, bad };

struct Row {
  std::string rank;                // the rank label or from the peer id ("rank3" -> 3); else the id
  std::string host;                // the host label with the port, or the address
  std::string state;               // derive_state
  std::vector<std::string> cells;  // EPOCH .. TEST-ACC; empty for a peer with no figures now
  std::string note;                // what is wrong, in words
  Tone tone = Tone::plain;
};

Row make_row(const WatchTarget& target, const PeerTrack& track,
             const std::map<std::string, Verdict>& verdicts, Clock::time_point now);
// The column titles and the rows, aligned (numbers to the right).
std::vector<std::string> table_lines(const std::vector<Row>& rows);

struct Line {
  std::string text;
  Tone tone = Tone::plain;
};

// Everything one refresh shows. `tracks` is parallel to `targets`.
struct FrameInput {
  const std::vector<WatchTarget>* targets = nullptr;
  const std::vector<const PeerTrack*>* tracks = nullptr;
  std::chrono::system_clock::time_point wall_time;
  Clock::time_point now;
  std::chrono::nanoseconds interval{};
  std::vector<std::string> warnings;  // a targets file that cannot be read, ...
};
std::vector<Line> frame(const FrameInput& in);

}  // namespace hearsay::watch
