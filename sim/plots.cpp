#include "sim/plots.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>

extern char** environ;

namespace hearsay::sim {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kGnuplotTimeout = std::chrono::seconds(60);
constexpr std::size_t kReasonChars = 300;
constexpr std::size_t kOutputKeepChars = 64 * 1024;  // gnuplot's output kept for the reason

struct Plot {
  const char* file;
  const char* title;
  const char* xlabel;
  const char* ylabel;
  // In the run datablocks: time_s run_epochs acc_avg_model consensus MB_per_peer.
  int x_column, y_column;
  bool accuracy;           // accuracy plots get the target line; the consensus plot may be log y
};

constexpr Plot kPlots[] = {
    {"accuracy_vs_time.png", "Averaged-model test accuracy against wall time", "wall time (s)",
     "averaged-model test accuracy (fraction)", 1, 3, true},
    {"accuracy_vs_epochs.png", "Averaged-model test accuracy against epochs",
     "epochs (samples trained by all peers / training-set size)", "averaged-model test accuracy (fraction)",
     2, 3, true},
    {"consensus_vs_time.png", "Consensus distance against wall time", "wall time (s)",
     "consensus distance (1/n) sum_i ||x_i - x_bar||^2", 1, 4, false},
    {"accuracy_vs_bytes.png", "Averaged-model test accuracy against bytes sent",
     "MB sent per peer (the mean over the run's peers)", "averaged-model test accuracy (fraction)", 5, 3,
     true},
};
constexpr int kBytesColumn = 5;

// Whether some evaluation knows the bytes sent by then: the bytes plot is drawn only then
// (gnuplot refuses a plot whose every point is undefined).
bool knows_bytes(const std::vector<const RunResult*>& runs) {
  for (const RunResult* r : runs)
    for (const auto& e : r->curve)
      if (e.bytes_per_peer >= 0) return true;
  return false;
}

// A gnuplot single-quoted string literal: inside, only ' is special (written ''). A line
// break would end the command, so titles get spaces instead (paths are refused earlier).
std::string gnuplot_string(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out += "''";
    else
      out += (c == '\n' || c == '\r') ? ' ' : c;
  }
  return out + "'";
}

std::string number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);  // nan/inf read back as undefined points
  return buf;
}

std::string megabytes(double bytes) { return bytes >= 0 ? number(bytes / 1e6) : "NaN"; }

std::string run_title(const RunResult& r, bool numbered) {
  std::string t = r.label();
  if (numbered) t += " #" + std::to_string(r.repeat);
  return t;
}

bool ended_badly(const RunResult& r) { return r.status.rfind("ok", 0) != 0; }

// The status in a few words for the legend: "failed: rank0 exit 1", "diverged: rank6 from
// step 25", "timeout after 600 s", or for an ok run whose fault never fired, what did not.
std::string short_status(const std::string& status) {
  if (status == "ok") return "";
  std::string s;
  if (status.rfind("ok (", 0) == 0) {
    s = "ok, but " + status.substr(4, status.find(": ", 4) - 4);  // "ok, but kill:1@20s never fired"
    if (!s.empty() && s.back() == ')') s.pop_back();
  } else {
    const auto first = status.find(": ");
    const auto second = first == std::string::npos ? std::string::npos : status.find(": ", first + 2);
    s = status.substr(0, second);
    if (const auto paren = s.find(" ("); paren != std::string::npos) s.erase(paren);
  }
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

std::filesystem::path temporary_of(const std::filesystem::path& png) { return png.string() + ".tmp"; }

// All-reduce's final accuracy less the margin, and when it ended: what the others are
// measured against (compare_with_allreduce).
struct Reference {
  double acc = 0, end_s = 0;
  std::string compress;  // what that all-reduce sent, when not f32 (named in the legend)
};

// A fired fault on one plot: a dashed line at x (a shaded span to x_end for a partition
// that healed), labelled with the fault as written; in its run's colour when only one run
// of several had it there.
struct Marker {
  double x = 0;
  std::optional<double> x_end;
  std::string label;
  std::vector<std::size_t> runs;  // indices into the plotted runs
};

// run_epochs at time t on the run's curve (linear between evaluations).
double epochs_at(const std::vector<Evaluation>& curve, double t) {
  if (curve.empty()) return 0;
  if (t <= curve.front().time_s) return curve.front().run_epochs * (curve.front().time_s > 0 ? t / curve.front().time_s : 0);
  for (std::size_t i = 1; i < curve.size(); ++i)
    if (t <= curve[i].time_s) {
      const auto& a = curve[i - 1];
      const auto& b = curve[i];
      const double f = b.time_s > a.time_s ? (t - a.time_s) / (b.time_s - a.time_s) : 1;
      return a.run_epochs + f * (b.run_epochs - a.run_epochs);
    }
  return curve.back().run_epochs;
}

// Every fired fault of every run, in the plot's x units (span: the axis's extent); the
// same fault at (nearly) the same place in several runs is one marker.
std::vector<Marker> fault_markers(const std::vector<const RunResult*>& runs, bool against_time, double span) {
  const double near = std::max(span, 1e-9) * 0.01;
  std::vector<Marker> markers;
  for (std::size_t i = 0; i < runs.size(); ++i)
    for (const FaultFiring& f : runs[i]->fault_firings) {
      if (!f.fired) continue;
      const double x = against_time ? f.time_s : f.run_epochs;
      std::optional<double> end;
      if (f.healed_s) end = against_time ? *f.healed_s : epochs_at(runs[i]->curve, *f.healed_s);
      const auto same = std::find_if(markers.begin(), markers.end(), [&](const Marker& m) {
        return m.label == f.fault && std::abs(m.x - x) <= near;
      });
      if (same != markers.end()) {
        same->runs.push_back(i);
        continue;
      }
      markers.push_back({x, end, f.fault, {i}});
    }
  return markers;
}

// The markers' gnuplot commands (objects, arrows and labels numbered from 1), and the
// commands that take them away again. `span` is the x axis's extent: a label goes left of
// its line, or right of it at the axis's start or when the previous label is close; the
// same fault close by in several runs is one label naming them.
std::pair<std::string, std::string> marker_commands(std::vector<Marker> markers, std::size_t runs,
                                                    const std::vector<std::string>& titles, double span) {
  std::sort(markers.begin(), markers.end(), [](const Marker& a, const Marker& b) { return a.x < b.x; });
  const double close = std::max(span, 1e-9) * 0.04;
  std::vector<std::vector<std::size_t>> label_runs(markers.size());
  std::vector<bool> labelled(markers.size(), true);
  for (std::size_t k = 0; k < markers.size(); ++k) {
    label_runs[k] = markers[k].runs;
    for (std::size_t j = 0; j < k; ++j)
      if (labelled[j] && markers[j].label == markers[k].label && markers[k].x - markers[j].x <= close) {
        labelled[k] = false;
        label_runs[j].insert(label_runs[j].end(), markers[k].runs.begin(), markers[k].runs.end());
        break;
      }
  }
  std::ostringstream set, unset;
  std::optional<double> last_label;
  bool last_right = false;
  for (std::size_t k = 0; k < markers.size(); ++k) {
    const Marker& m = markers[k];
    const int n = static_cast<int>(k) + 1;
    const auto colour_of = [&](const std::vector<std::size_t>& of) {
      return of.size() == 1 && runs > 1 ? std::to_string(of.front() + 1) : std::string("rgb '#595959'");
    };
    const std::string line = colour_of(m.runs);
    if (m.x_end && *m.x_end > m.x)
      set << "set object " << n << " rect from " << number(m.x) << ", graph 0 to " << number(*m.x_end)
          << ", graph 1 behind fillcolor rgb '#e6e6e6' fillstyle solid 1.0 noborder\n";
    set << "set arrow " << n << " from " << number(m.x) << ", graph 0 to " << number(m.x)
        << ", graph 1 nohead dashtype 2 linewidth 1.5 linecolor " << line << " front\n";
    unset << "unset object " << n << "\nunset arrow " << n << "\nunset label " << n << '\n';
    if (!labelled[k]) continue;
    std::string label = m.label;
    if (label_runs[k].size() < runs) {
      std::string names;
      for (std::size_t r : label_runs[k]) names += (names.empty() ? "" : ", ") + titles[r];
      label += " (" + names + ")";
    }
    const std::string colour = colour_of(label_runs[k]);
    const bool right = m.x <= close / 4 || (last_label && m.x - *last_label <= close && !last_right);
    set << "set label " << n << ' ' << gnuplot_string(label) << " at " << number(m.x)
        << ", graph 0.03 rotate by 90 left front offset " << (right ? "1.1" : "-0.9")
        << ",0 font ',9' textcolor " << (colour.front() == 'r' ? colour : "lt " + colour) << '\n';
    last_label = m.x;
    last_right = right;
  }
  return {set.str(), unset.str()};
}

// The datablocks: per run its curve (time_s run_epochs acc_avg_model consensus).
std::string datablocks(const std::vector<const RunResult*>& runs, bool log_consensus, double floor,
                       std::vector<bool>& has_zero) {
  std::ostringstream s;
  has_zero.assign(runs.size(), false);
  for (std::size_t i = 0; i < runs.size(); ++i) {
    s << "$run" << i << " << EOD\n";
    for (const auto& e : runs[i]->curve) {
      const bool zero = e.consensus_distance == 0;
      has_zero[i] = has_zero[i] || zero;
      const double consensus = log_consensus && zero ? floor : e.consensus_distance;
      s << number(e.time_s) << ' ' << number(e.run_epochs) << ' ' << number(e.acc_avg_model) << ' '
        << number(consensus) << ' ' << megabytes(e.bytes_per_peer) << '\n';
    }
    s << "EOD\n";
    // A run that ended badly: from its last evaluation to where it ended (its wall time;
    // in epochs, the last fault that fired, what most likely ended it), where its cross goes.
    if (ended_badly(*runs[i]) && !runs[i]->curve.empty()) {
      const Evaluation& last = runs[i]->curve.back();
      double end_epochs = last.run_epochs;
      for (const FaultFiring& f : runs[i]->fault_firings)
        if (f.fired) end_epochs = std::max(end_epochs, f.run_epochs);
      const double consensus = log_consensus && last.consensus_distance == 0 ? floor : last.consensus_distance;
      s << "$end" << i << " << EOD\n";
      for (const auto& [t, ep] : {std::pair{last.time_s, last.run_epochs},
                                  std::pair{std::max(runs[i]->wall_s, last.time_s), end_epochs}})
        s << number(t) << ' ' << number(ep) << ' ' << number(last.acc_avg_model) << ' ' << number(consensus)
          << ' ' << megabytes(last.bytes_per_peer) << '\n';
      s << "EOD\n";
    }
  }
  return s.str();
}

// Compressors send 1/8 to 1/100 of f32's bytes: a sweep of them spans decades, on a log axis.
bool bytes_span_decades(const std::vector<const RunResult*>& runs) {
  double fewest = std::numeric_limits<double>::infinity(), most = 0;
  for (const RunResult* r : runs)
    for (const auto& e : r->curve)
      if (e.bytes_per_peer > 0) {
        fewest = std::min(fewest, e.bytes_per_peer);
        most = std::max(most, e.bytes_per_peer);
      }
  return std::isfinite(fewest) && most > 20 * fewest;
}

// A plot's title and x label. The virtual engine's clock is the modelled one, not the
// machine's: its time axis says so.
std::pair<std::string, std::string> plot_words(const Plot& p, bool virtual_time) {
  std::string title = p.title, xlabel = p.xlabel;
  if (p.x_column == 1 && virtual_time) {
    title.replace(title.find("wall time"), 9, "virtual time");
    xlabel = "virtual time (s): the modelled steps and links";
  }
  return {title, xlabel};
}

// The whole gnuplot program: one datablock per run, then the three plots, each written to
// its NAME.png.tmp and closed (`unset output`) before the next. The legend goes under the
// plot, where it hides no data, and the canvas grows with it.
std::string gnuplot_script(const std::filesystem::path& dir, const std::vector<const RunResult*>& runs,
                           bool numbered, const std::optional<double>& target,
                           const std::optional<Reference>& reference) {
  std::ostringstream s;
  const std::size_t entries = runs.size() + (target ? 1 : 0) + (reference ? 1 : 0);
  s << "set terminal pngcairo size 960," << 560 + 22 * entries << " noenhanced\nset grid\n"
    << "set key outside below left Left reverse nobox maxcols 1 height 1\nset xrange [0:*]\n";
  // The consensus plot is on a log axis as soon as one distance is positive: distances
  // span decades. An exact 0 (allreduce's peers are identical) has no place there: it is
  // drawn at a floor a decade below the smallest positive distance, and the run's title
  // says so (skipped, allreduce vanished from the plot); without any positive value the
  // axis is linear.
  double smallest = std::numeric_limits<double>::infinity();
  for (const RunResult* r : runs)
    for (const auto& e : r->curve)
      if (std::isfinite(e.consensus_distance) && e.consensus_distance > 0)
        smallest = std::min(smallest, e.consensus_distance);
  const bool log_consensus = std::isfinite(smallest);
  const double floor = log_consensus ? std::pow(10.0, std::floor(std::log10(smallest)) - 1) : 0;
  std::vector<bool> has_zero;
  s << datablocks(runs, log_consensus, floor, has_zero);
  std::vector<std::string> titles;
  for (const RunResult* r : runs) titles.push_back(run_title(*r, numbered));
  const bool bytes = knows_bytes(runs);
  const bool log_bytes = bytes_span_decades(runs);
  const bool virtual_time =
      std::ranges::all_of(runs, [](const RunResult* r) { return r->engine == "virtual"; });
  for (const Plot& p : kPlots) {
    if (p.x_column == kBytesColumn && !bytes) continue;
    const bool against_time = p.x_column == 1;
    double span = 0;
    for (const RunResult* r : runs)
      for (const auto& e : r->curve) span = std::max(span, against_time ? e.time_s : e.run_epochs);
    // Faults are marked in time and epochs; bytes are no place to mark them.
    const auto [markers, unmark] =
        p.x_column == kBytesColumn
            ? std::pair<std::string, std::string>{}
            : marker_commands(fault_markers(runs, against_time, span), runs.size(), titles, span);
    const auto [title, xlabel] = plot_words(p, virtual_time);
    s << "set output " << gnuplot_string(temporary_of(dir / p.file).string()) << '\n'
      << "set title " << gnuplot_string(title) << "\nset xlabel " << gnuplot_string(xlabel) << "\nset ylabel "
      << gnuplot_string(p.ylabel) << '\n'
      << (!p.accuracy && log_consensus ? "set logscale y\n" : "unset logscale y\n") << markers;
    if (p.x_column == kBytesColumn && log_bytes) s << "set logscale x\nset xrange [*:*]\n";
    if (p.accuracy && reference && against_time)  // where all-reduce ended
      s << "set arrow 99 from " << number(reference->end_s) << ", graph 0 to " << number(reference->end_s)
        << ", graph 1 nohead dashtype 3 linecolor rgb 'gray50'\n";
    s << "plot ";
    for (std::size_t i = 0; i < runs.size(); ++i) {
      std::string title = titles[i];
      if (!p.accuracy && log_consensus && has_zero[i]) title += " (exactly 0: drawn at " + number(floor) + ")";
      if (const std::string status = short_status(runs[i]->status); !status.empty()) title += " - " + status;
      s << (i ? ", " : "") << "$run" << i << " using " << p.x_column << ':' << p.y_column
        << " with linespoints linetype " << i + 1 << " pointsize 0.8 title " << gnuplot_string(title);
      // A run that ended badly: dotted on from its last evaluation, and a large cross where
      // it stopped.
      if (ended_badly(*runs[i]))
        s << ", $end" << i << " using " << p.x_column << ':' << p.y_column << " with lines linetype " << i + 1
          << " dashtype 3 notitle, $end" << i << " every ::1 using " << p.x_column << ':' << p.y_column
          << " with points linetype " << i + 1 << " pointtype 2 pointsize 3 linewidth 2 notitle";
    }
    if (p.accuracy && target)
      s << ", " << number(*target) << " with lines dashtype 2 linecolor rgb 'gray30' title "
        << gnuplot_string("target " + number(*target));
    if (p.accuracy && reference)
      s << ", " << number(reference->acc) << " with lines dashtype 4 linecolor rgb 'gray50' title "
        << gnuplot_string("all-reduce's" +
                          (reference->compress.empty() ? "" : " (" + reference->compress + ")") +
                          " final accuracy - 0.5 point" +
                          std::string(against_time ? " (dotted: all-reduce ended)" : ""));
    s << "\nunset output\nunset arrow 99\n" << unmark;
    if (p.x_column == kBytesColumn && log_bytes) s << "unset logscale x\nset xrange [0:*]\n";
  }
  return s.str();
}

// The tail of gnuplot's output on one line: its error message comes last, and the caret
// lines that point into the command are mostly blanks.
std::string reason_text(const std::string& output) {
  std::string line;
  for (char c : output) {
    const bool blank = std::isspace(static_cast<unsigned char>(c)) != 0;
    if (!blank)
      line += c;
    else if (!line.empty() && line.back() != ' ')
      line += ' ';
  }
  while (!line.empty() && line.back() == ' ') line.pop_back();
  if (line.size() > kReasonChars) line = "..." + line.substr(line.size() - kReasonChars);
  return line;
}

// Writes script to to_child and reads what gnuplot prints from from_child (keeping the
// last kOutputKeepChars) until both ends are done or the deadline passes; closes both.
std::string exchange_with_gnuplot(int to_child, int from_child, const std::string& script,
                                  Clock::time_point deadline) {
  ::fcntl(to_child, F_SETFL, O_NONBLOCK);
  std::size_t sent = 0;
  std::string output;
  while ((to_child >= 0 || from_child >= 0) && Clock::now() < deadline) {
    pollfd fds[2] = {{to_child, POLLOUT, 0}, {from_child, POLLIN, 0}};  // fd -1: ignored
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (::poll(fds, 2, static_cast<int>(std::max<long long>(left.count(), 1))) < 0 && errno != EINTR) break;
    if (to_child >= 0 && fds[0].revents != 0) {
      const ssize_t n = ::send(to_child, script.data() + sent, script.size() - sent, MSG_NOSIGNAL);
      if (n > 0) sent += static_cast<std::size_t>(n);
      // Done, or gnuplot stopped reading (EPIPE): its exit status and output will say why.
      if (sent == script.size() || (n < 0 && errno != EAGAIN && errno != EINTR))
        ::close(std::exchange(to_child, -1));
    }
    if (from_child >= 0 && fds[1].revents != 0) {
      char buf[4096];
      const ssize_t n = ::read(from_child, buf, sizeof buf);
      if (n > 0) {
        output.append(buf, static_cast<std::size_t>(n));
        if (output.size() > kOutputKeepChars) output.erase(0, output.size() - kOutputKeepChars);
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        ::close(std::exchange(from_child, -1));
      }
    }
  }
  if (to_child >= 0) ::close(to_child);
  if (from_child >= 0) ::close(from_child);
  return output;
}

// Waits for gnuplot's exit status until the deadline (killing it after that); returns why
// it failed, with the reason from its output, or "" when it exited 0.
std::string wait_for_gnuplot(pid_t pid, const std::string& gnuplot, const std::string& output,
                             Clock::time_point deadline) {
  // The output ends when gnuplot exits; poll for its status until the same deadline.
  int status = 0;
  pid_t waited = 0;
  while ((waited = ::waitpid(pid, &status, WNOHANG)) == 0 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (waited == 0) {
    ::kill(pid, SIGKILL);
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return gnuplot + " did not finish in " + std::to_string(kGnuplotTimeout.count()) + " s (killed)";
  }
  if (waited < 0) return "cannot wait for " + gnuplot + ": " + std::strerror(errno);
  std::string what;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  if (WIFEXITED(status))
    what = "exited with status " + std::to_string(WEXITSTATUS(status));
  else if (WIFSIGNALED(status))
    what = "was killed by signal " + std::to_string(WTERMSIG(status));
  else
    what = "failed";
  const std::string reason = reason_text(output);
  return gnuplot + " " + what + (reason.empty() ? "" : ": " + reason);
}

// Runs `gnuplot` with `script` on its stdin and returns why it failed, or "" on success.
// stdin is one end of a socket pair rather than a pipe so that writing to a gnuplot that
// has already exited gives EPIPE with MSG_NOSIGNAL instead of a SIGPIPE for the whole
// process. Writing the script and reading the output happen in one poll loop, so neither
// side can block the other on a full buffer.
std::string run_gnuplot(const std::string& gnuplot, const std::string& script) {
  int in[2], out[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in) != 0)
    return std::string("cannot create a socket pair for gnuplot: ") + std::strerror(errno);
  if (::pipe2(out, O_CLOEXEC) != 0) {
    const int err = errno;
    ::close(in[0]);
    ::close(in[1]);
    return std::string("cannot create a pipe for gnuplot: ") + std::strerror(err);
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[1], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDERR_FILENO);
  // -d: the default settings, so that a user's ~/.gnuplot cannot change the plots.
  std::string arg0 = gnuplot, arg1 = "-d";
  char* argv[] = {arg0.data(), arg1.data(), nullptr};
  pid_t pid = -1;
  const int spawn_error = ::posix_spawnp(&pid, gnuplot.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(in[1]);
  ::close(out[1]);
  if (spawn_error != 0) {
    ::close(in[0]);
    ::close(out[0]);
    if (spawn_error == ENOENT && gnuplot.find('/') == std::string::npos)
      return gnuplot + " not found on PATH: install gnuplot-nox (scripts/setup does)";
    return "cannot run " + gnuplot + ": " + std::strerror(spawn_error);
  }

  const auto deadline = Clock::now() + kGnuplotTimeout;
  const std::string output = exchange_with_gnuplot(in[0], out[0], script, deadline);
  return wait_for_gnuplot(pid, gnuplot, output, deadline);
}

void remove_quietly(const std::filesystem::path& p) {
  std::error_code ec;
  std::filesystem::remove(p, ec);
}

}  // namespace

PlotResult write_plots(const std::filesystem::path& dir, const std::vector<RunResult>& runs,
                       const std::string& gnuplot) {
  PlotResult result;
  std::vector<const RunResult*> plotted;
  bool numbered = false;
  std::optional<double> target;
  for (const auto& r : runs) {
    if (!r.curve.empty()) plotted.push_back(&r);
    numbered = numbered || r.repeat > 0;
    if (!target && r.target_acc && std::isfinite(*r.target_acc)) target = r.target_acc;
  }
  if (plotted.empty()) {
    result.skipped = "no run has an evaluation to plot";
    return result;
  }
  // The paths go into the script as string literals, which cannot hold a line break.
  if (dir.string().find_first_of("\n\r") != std::string::npos) {
    result.skipped = "the output directory's name has a line break, which gnuplot cannot take";
    return result;
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    result.skipped = "cannot create " + dir.string() + ": " + ec.message();
    return result;
  }

  std::optional<Reference> reference;
  if (const RunResult* a = allreduce_reference(runs, 0))
    reference = Reference{a->final_evaluation()->acc_avg_model - kReferenceMargin, a->wall_s,
                          a->compress == "f32" ? "" : a->compress};
  result.skipped = run_gnuplot(gnuplot, gnuplot_script(dir, plotted, numbered, target, reference));
  // gnuplot succeeded only if it wrote every file; then each is renamed into place.
  for (const Plot& p : kPlots) {
    if (p.x_column == kBytesColumn && !knows_bytes(plotted)) {
      remove_quietly(dir / p.file);  // an earlier drawing's: it would describe other runs
      continue;
    }
    const auto png = dir / p.file, tmp = temporary_of(png);
    const auto size = std::filesystem::file_size(tmp, ec);
    if (result.skipped.empty() && (ec || size == 0)) result.skipped = gnuplot + " wrote no " + p.file;
    if (result.skipped.empty()) {
      std::filesystem::rename(tmp, png, ec);
      if (ec)
        result.skipped = "cannot rename " + tmp.string() + ": " + ec.message();
      else
        result.written.push_back(png);
    }
    remove_quietly(tmp);
  }
  if (!result.skipped.empty()) {
    // All or nothing: plots from a failed drawing may be half of what was asked for.
    for (const auto& png : result.written) remove_quietly(png);
    result.written.clear();
  }
  return result;
}

}  // namespace hearsay::sim
