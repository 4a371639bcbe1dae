#include "peer/watch_command.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>

#include "peer/duration_flag.hpp"
#include "peer/http_client.hpp"
#include "peer/watch_status.hpp"
#include "peer/watch_table.hpp"
#include "peer/watch_targets.hpp"

namespace hearsay {

namespace {

using watch::Clock;
using namespace std::chrono_literals;

constexpr std::size_t kMaxBody = 8 * 1024 * 1024;  // a /status of thousands of members fits
constexpr auto kMinInterval = 100ms;

// SIGINT, SIGTERM and SIGHUP (stop), SIGWINCH and SIGCONT (draw again), each written by
// its handler as one byte into a pipe that the watch loop waits on between refreshes.
// Handlers, not a blocked mask and sigtimedwait: libraries start threads before main(),
// and a signal that one of those takes would end the process with the terminal left on
// the alternate screen. The previous handlers come back on destruction.
class SignalPipe {
 public:
  SignalPipe() {
    if (::pipe2(fds_, O_CLOEXEC | O_NONBLOCK) != 0)
      throw std::runtime_error(std::string("cannot make a pipe for signals: ") + std::strerror(errno));
    write_fd_.store(fds_[1]);
    struct sigaction action = {};
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    for (std::size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &action, &old_[i]);
  }
  ~SignalPipe() {
    for (std::size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &old_[i], nullptr);
    write_fd_.store(-1);
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  // The signal that came before `deadline`, or 0 when none did.
  int wait_until(Clock::time_point deadline) const {
    for (;;) {
      const auto left = deadline - Clock::now();
      if (left <= 0ns) return 0;
      pollfd in{fds_[0], POLLIN, 0};
      const int ms = static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(left).count());
      if (::poll(&in, 1, ms) <= 0) continue;  // the deadline, or EINTR: look again
      unsigned char signal = 0;
      if (::read(fds_[0], &signal, 1) == 1) return signal;
    }
  }

 private:
  static constexpr std::array<int, 5> kSignals = {SIGINT, SIGTERM, SIGHUP, SIGWINCH, SIGCONT};
  static void on_signal(int signal) {  // async-signal-safe: write(2) only
    const int saved = errno;
    const int fd = write_fd_.load();
    const auto byte = static_cast<unsigned char>(signal);
    if (fd >= 0 && ::write(fd, &byte, 1) < 0) {
      // a full pipe: signals enough are already waiting
    }
    errno = saved;
  }
  static inline std::atomic<int> write_fd_{-1};  // lock-free: read in the handler
  int fds_[2] = {-1, -1};
  std::array<struct sigaction, kSignals.size()> old_{};
};

bool is_stop(int signal) { return signal == SIGINT || signal == SIGTERM || signal == SIGHUP; }

// What the screen shows: on a terminal, drawn in place on the alternate screen with the
// cursor hidden (both given back on destruction, the last frame then printed to the
// normal screen where it stays); elsewhere each frame printed plainly.
class Screen {
 public:
  Screen(bool terminal, bool color) : terminal_(terminal), color_(color) {
    if (terminal_) write("\x1b[?1049h\x1b[?25l");
  }
  ~Screen() {
    if (!terminal_) return;
    write("\x1b[0m\x1b[?25h\x1b[?1049l");
    std::string text;
    for (const auto& line : last_) text += watch::fit(line.text, width()) + "\n";
    write(text);
  }
  Screen(const Screen&) = delete;
  Screen& operator=(const Screen&) = delete;

  void show(std::vector<watch::Line> lines) {
    last_ = std::move(lines);
    if (terminal_) {
      redraw();
      return;
    }
    std::string text = shown_ > 0 ? "\n" : "";  // frames of --count apart
    for (const auto& line : last_) text += line.text + "\n";
    write(text);
    ++shown_;
  }

  void redraw() {
    if (!terminal_) return;
    winsize size{};
    const bool known = ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0 && size.ws_row > 1;
    const std::size_t cols = known ? size.ws_col : 80, rows = known ? size.ws_row : 24;
    std::string text = "\x1b[H";
    const std::size_t room = rows - 1;  // the last row stays free: nothing scrolls
    for (std::size_t i = 0; i < last_.size() && i < room; ++i) {
      const bool cut = i + 1 == room && last_.size() > room;
      const std::string line =
          cut ? "... " + std::to_string(last_.size() - i) + " more lines (a taller terminal shows them)"
              : last_[i].text;
      text += "\x1b[2K" + paint(watch::fit(line, cols), cut ? watch::Tone::warn : last_[i].tone) + "\r\n";
    }
    write(text + "\x1b[J");
  }

 private:
  std::string paint(const std::string& text, watch::Tone tone) const {
    if (!color_ || tone == watch::Tone::plain || text.empty()) return text;
    const char* on = tone == watch::Tone::title  ? "\x1b[1m"
                     : tone == watch::Tone::warn ? "\x1b[33m"
                                                 : "\x1b[31m";
    return on + text + "\x1b[0m";
  }
  static std::size_t width() {
    winsize size{};
    return ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 ? size.ws_col : 0;
  }
  static void write(const std::string& text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  }

  const bool terminal_;
  const bool color_;
  std::vector<watch::Line> last_;
  int shown_ = 0;
};

// The peers, poll after poll: one track per address, kept when a targets file changes.
class Watch {
 public:
  Watch(TargetList targets, const WatchOptions& o, std::chrono::nanoseconds timeout)
      : targets_(std::move(targets)), options_(o), timeout_(timeout) {}

  // Polls every target once; returns the frame to show and whether every target answered.
  std::vector<watch::Line> refresh(bool& all_answered) {
    std::vector<std::string> warnings = targets_.refresh();
    const std::vector<WatchTarget>& targets = targets_.targets();
    std::vector<HttpUrl> urls;
    for (const WatchTarget& t : targets) urls.push_back(t.url);
    const std::vector<HttpReply> replies = client_.get_all(urls, timeout_, kMaxBody);
    const Clock::time_point now = Clock::now();
    std::vector<const watch::PeerTrack*> tracks;
    all_answered = true;
    for (std::size_t i = 0; i < targets.size(); ++i) {
      watch::PeerTrack& track = tracks_[targets[i].url.text()];
      track.update(replies[i], now);
      all_answered = all_answered && track.answering();
      tracks.push_back(&track);
    }
    watch::FrameInput in;
    in.targets = &targets;
    in.tracks = &tracks;
    in.wall_time = std::chrono::system_clock::now();
    in.now = now;
    in.interval = options_.interval;
    in.warnings = std::move(warnings);
    return watch::frame(in);
  }

 private:
  TargetList targets_;
  const WatchOptions& options_;
  const std::chrono::nanoseconds timeout_;
  HttpClient client_;
  std::map<std::string, watch::PeerTrack> tracks_;
};

// The loop: refresh, show, wait for the next refresh or a signal.
int watch_loop(Watch& watch, const WatchOptions& o, const SignalPipe& signals, bool terminal, bool color) {
  Screen screen(terminal, color);
  bool all_answered = false;
  for (int refreshes = 1;; ++refreshes) {
    const Clock::time_point started = Clock::now();
    screen.show(watch.refresh(all_answered));
    if (o.once || (o.count == 0 && !terminal) || (o.count > 0 && refreshes >= o.count)) break;
    for (;;) {
      const int signal = signals.wait_until(started + o.interval);
      if (signal == 0) break;
      if (is_stop(signal)) return 0;
      screen.redraw();  // the terminal's size changed, or it came back from the background
    }
  }
  return all_answered ? 0 : 1;
}

}  // namespace

CLI::App* add_watch_command(CLI::App& app, WatchOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "watch", "Show a run's peers live, one line each, from their --http /status (no Prometheus needed)");
  cmd->add_option("TARGET", o.targets,
                  "A peer's --http address (http://HOST:PORT, HOST:PORT or :PORT), or a Prometheus file_sd "
                  "targets file (scripts/launch writes hearsay-targets.json), read again when it changes")
      ->required()
      ->type_name("URL|FILE");
  add_duration(*cmd, "--interval", o.interval, "Time between refreshes (at least 100ms)");
  add_duration(*cmd, "--timeout", o.timeout,
               "How long a peer may take to answer; a slower one shows as 'no answer' (timed out)")
      ->default_str("4/5 of --interval");
  CLI::Option* once =
      cmd->add_flag("--once", o.once,
                    "Print the table once and exit (what happens anyway when the output is not "
                    "a terminal)");
  cmd->add_option("--count", o.count, "Refresh N times, then exit (the last table stays)")
      ->type_name("N")
      ->check(CLI::PositiveNumber)
      ->excludes(once);
  cmd->add_flag("--no-color", o.no_color, "No colours on a terminal (also when NO_COLOR is set)");
  cmd->footer(
      "Columns: STATE is the peer's own (joining, waiting, held, training, paused, ending), or, for a peer\n"
      "that does not answer, 'no answer' (with why and for how long), 'bad reply' or 'ended' (it said bye).\n"
      "STEP/S is measured between refreshes; PARTNERS the live members it sees, of those it knows;\n"
      "DISTANCE the mean parameter distance to its partners; IN/OUT the bytes it received and sent\n"
      "(K, M, G: binary units); DROPS the messages its transport dropped. The NOTE says what the answering\n"
      "peers' member lists say of a peer: 'dead per 3 peers' for one killed a while ago.\n"
      "Exit status: 0 when every peer answered the last refresh (or Ctrl-C ended it), 1 when some did not,\n"
      "2 for a bad target or flag.\n"
      "Examples:\n"
      "  hearsay watch hearsay-targets.json                  (the peers scripts/launch started with --http)\n"
      "  hearsay watch 10.0.0.11:9100 10.0.0.12:9100 --interval 2s\n"
      "  hearsay watch --once :9100 :9101 :9102 :9103         (a table, for a script; exit 1 if one is "
      "silent)");
  return cmd;
}

int run_watch(const WatchOptions& o) {
  if (o.interval < kMinInterval) {
    std::fprintf(stderr, "hearsay watch: --interval %s is too short; give 100ms or more\n",
                 format_duration(o.interval).c_str());
    return 2;
  }
  const auto timeout = o.timeout > 0ns ? o.timeout : o.interval * 4 / 5;
  std::optional<TargetList> targets;
  try {
    targets.emplace(o.targets);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "hearsay watch: %s\n", e.what());
    return 2;
  }
  const bool terminal = ::isatty(STDOUT_FILENO) != 0 && !o.once;
  const bool color = terminal && !o.no_color && std::getenv("NO_COLOR") == nullptr;
  try {
    const SignalPipe signals;
    Watch watch(std::move(*targets), o, timeout);
    return watch_loop(watch, o, signals, terminal, color);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hearsay watch: %s\n", e.what());
    return 1;
  }
}

}  // namespace hearsay
