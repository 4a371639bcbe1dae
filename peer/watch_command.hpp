// `hearsay watch`: a live view of a run without Prometheus. Polls every peer's --http
// /status at once, every --interval, and shows one line per peer (state, epoch and step,
// steps/s, loss, partners, distance to them, bytes, drops), what the answering peers say
// of a silent one ("no answer for 3.1s (connection refused); dead per 3 peers"), and a
// header with the run and how many answer. On a terminal it redraws in place until
// Ctrl-C; otherwise (or with --once) it prints the table once.
#pragma once
#include <CLI/CLI.hpp>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace hearsay {

struct WatchOptions {
  std::vector<std::string> targets;  // URLs, HOST:PORT, or file_sd targets files
  std::chrono::nanoseconds interval = std::chrono::seconds(1);
  std::chrono::nanoseconds timeout{0};  // 0: 4/5 of the interval
  bool once = false;
  int count = 0;  // 0: until stopped (on a terminal)
  bool no_color = false;
};

// Registers the subcommand and its flags; the options are filled in when parsed.
CLI::App* add_watch_command(CLI::App& app, WatchOptions& options);
// Returns the exit code: 0 when every peer answered the last refresh (or a stop signal
// ended the watch), 1 when some did not, 2 for a target that is no address and no
// readable targets file, or settings that do not fit together.
int run_watch(const WatchOptions& options);

}  // namespace hearsay
