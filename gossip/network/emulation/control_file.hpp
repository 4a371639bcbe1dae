// A file through which `hearsay sim` changes a running peer's emulation (--control-file):
// which peers it is cut off from (a partition) and how much slower it computes (a slow
// fault that starts late). A file, not a message: it needs no new wire message and no
// open port, and the simulator can rewrite it atomically at any time.
//
// The format, one setting per line ('#' starts a comment, blank lines are skipped):
//   blocked ID [ID ...]   the peers this one stops talking to (a line "blocked" heals)
//   slowdown F            each step's computation takes F times as long (F >= 1)
//   link RATE,DELAY[,...] this peer's own access link from now on (link_spec.hpp), in place
//                         of its --link: a link fault that starts or heals during the run
//                         (the peer needs --link-may-change for it)
//   hold                  do not take the first step yet: the simulator starts every peer
//                         together by removing it once all are ready (peer_process.hpp)
//   pause-at STEP         once STEP steps are done, write a `paused` record to the metrics
//                         and take no further step while this line stays: the simulator
//                         delivers a kill or restart given in epochs there, exactly, even
//                         in a run shorter than its look at the metrics
//   stop                  the run's budget is spent: end training after the current step,
//                         as at the end of the epochs (checkpoint, bye, final record)
// A missing file, or a missing line, means "nothing blocked", "the --slowdown flag", "the
// --link flag" and "no hold" (and no pause).
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "gossip/network/emulation/link_spec.hpp"

namespace hearsay::emulation {

struct PeerControl {
  std::vector<std::string> blocked;
  std::optional<double> slowdown;
  std::optional<LinkSpec> link;
  bool hold = false;
  std::optional<std::int64_t> pause_at;
  bool stop = false;

  bool operator==(const PeerControl&) const = default;
};

// Parses the file's text; std::invalid_argument naming the line and what is wrong.
PeerControl parse_peer_control(std::string_view text);
// The text parse_peer_control reads back as `control`.
std::string to_text(const PeerControl& control);

// Watches a control file from its own thread and calls `on_change` (on that thread) with
// its settings: once at the start, then within `interval` of every change (by size or
// modification time). A file that does not parse is reported through `on_error` and
// ignored: the previous settings stay. Never throws from its thread or its destructor.
class ControlFileWatcher {
 public:
  ControlFileWatcher(std::filesystem::path path, std::function<void(const PeerControl&)> on_change,
                     std::function<void(const std::string&)> on_error,
                     std::chrono::milliseconds interval = std::chrono::milliseconds(50));
  ~ControlFileWatcher();
  ControlFileWatcher(const ControlFileWatcher&) = delete;
  ControlFileWatcher& operator=(const ControlFileWatcher&) = delete;

 private:
  void run();
  void check();

  const std::filesystem::path path_;
  const std::function<void(const PeerControl&)> on_change_;
  const std::function<void(const std::string&)> on_error_;
  const std::chrono::milliseconds interval_;
  std::optional<std::pair<std::uintmax_t, std::filesystem::file_time_type>> seen_;  // size, mtime
  bool seen_missing_ = false;
  std::mutex mutex_;
  std::condition_variable closing_cv_;
  bool closing_ = false;
  std::thread thread_;
};

}  // namespace hearsay::emulation
