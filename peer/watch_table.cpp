#include "peer/watch_table.hpp"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <set>

#include "peer/duration_flag.hpp"
#include "peer/peer_config.hpp"

namespace hearsay::watch {

namespace {

constexpr std::size_t kGap = 2;
const std::vector<std::string> kLeadTitles = {"RANK", "HOST", "STATE"};
const std::vector<std::string> kCellTitles = {
    "EPOCH", "STEP", "STEP/S", "SAMPLES/S", "LOSS", "PARTNERS", "DISTANCE", "IN", "OUT", "DROPS", "TEST-ACC"};

std::string printf_text(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

std::string rank_text(const WatchTarget& target, const std::string& id) {
  const auto it = target.labels.find("rank");
  if (it != target.labels.end() && !it->second.empty()) return it->second;
  if (is_rank_peer_id(id)) return id.substr(4);
  return id.empty() ? "-" : fit(id, 12);
}

std::string host_text(const WatchTarget& target) {
  const auto it = target.labels.find("host");
  if (it == target.labels.end() || it->second.empty()) return target.url.host_port();
  return it->second + ":" + std::to_string(target.url.port);
}

// The member id the others know this target by: what it said, else its rank label's.
std::string member_id(const WatchTarget& target, const PeerTrack& track) {
  if (track.ever_answered() && !track.last()->peer.empty()) return track.last()->peer;
  const auto it = target.labels.find("rank");
  if (it == target.labels.end() || it->second.empty() ||
      it->second.find_first_not_of("0123456789") != std::string::npos || it->second.size() > 6)
    return "";
  return rank_peer_id(std::stoi(it->second));
}

std::vector<std::string> cells_of(const PeerStatus& s, const std::optional<double>& step_rate) {
  std::string epoch = std::to_string(s.epoch);
  if (s.epochs) epoch += "/" + printf_text("%g", *s.epochs);
  const Partners p = partners_of(s);
  return {epoch,
          std::to_string(s.step),
          format_optional(step_rate, "%.1f"),
          format_optional(s.samples_per_s, "%.0f"),
          format_optional(s.loss, s.loss && *s.loss >= 1000 ? "%.3g" : "%.4f"),
          std::to_string(p.alive) + "/" + std::to_string(p.known),
          format_optional(s.partner_distance, "%.3g"),
          format_bytes(s.bytes_received),
          format_bytes(s.bytes_sent),
          std::to_string(s.dropped),
          s.test_acc ? printf_text("%.1f%%", *s.test_acc * 100) : "-"};
}

// Why a peer that does not answer has no figures, and what the others say of it.
std::string silent_note(const PeerTrack& track, const Verdict* verdict, Clock::time_point now) {
  std::string why = track.error();
  if (track.bad_reply() && why.rfind("bad reply: ", 0) == 0) why = why.substr(11);
  // "for 3.2s: connection refused"; at the first poll only why.
  const double silent = track.silent_s(now);
  std::string note = silent >= 0.05 ? printf_text("for %.1fs: ", silent) + why : why;
  const std::string said = verdict ? verdict_text(*verdict, true) : "";
  if (!said.empty()) note += "; " + said;
  if (track.ever_answered()) {
    const PeerStatus& s = *track.last();
    note += "; last seen at epoch " + std::to_string(s.epoch) + ", step " + std::to_string(s.step);
  }
  return note;
}

std::string pad(const std::string& text, std::size_t width, bool right) {
  if (text.size() >= width) return text;
  const std::string fill(width - text.size(), ' ');
  return right ? fill + text : text + fill;
}

std::string run_names(const FrameInput& in) {
  std::set<std::string> runs;
  for (std::size_t i = 0; i < in.targets->size(); ++i) {
    const PeerTrack& t = *(*in.tracks)[i];
    if (t.ever_answered() && !t.last()->run.empty()) runs.insert(t.last()->run);
    const auto label = (*in.targets)[i].labels.find("run");
    if (!t.ever_answered() && label != (*in.targets)[i].labels.end()) runs.insert(label->second);
  }
  std::string out;
  for (const std::string& r : runs) out += (out.empty() ? "" : ", ") + r;
  return out.empty() ? "?" : out;
}

Line header_line(const FrameInput& in) {
  std::size_t answering = 0;
  for (const PeerTrack* t : *in.tracks) answering += t->answering() ? 1 : 0;
  const std::time_t wall = std::chrono::system_clock::to_time_t(in.wall_time);
  std::tm local{};
  localtime_r(&wall, &local);
  char clock[16];
  std::strftime(clock, sizeof clock, "%H:%M:%S", &local);
  const std::size_t total = in.targets->size();
  return {"hearsay watch   run " + run_names(in) + "   " + std::to_string(answering) + "/" +
              std::to_string(total) + " answering   " + clock + "   every " + format_duration(in.interval),
          Tone::title};
}

// Members that the answering peers know of and no target is: "not watched: rank4 (alive per 3 peers)".
std::vector<Line> unwatched_lines(const FrameInput& in, const std::map<std::string, Verdict>& verdicts) {
  std::set<std::string> watched;
  for (std::size_t i = 0; i < in.targets->size(); ++i)
    watched.insert(member_id((*in.targets)[i], *(*in.tracks)[i]));
  std::string text;
  for (const auto& [id, verdict] : verdicts)
    if (!watched.count(id))
      text += (text.empty() ? "" : ", ") + id + " (" + verdict_text(verdict, true) + ")";
  if (text.empty()) return {};
  return {{"members not watched here: " + text, Tone::plain}};
}

}  // namespace

std::string format_bytes(std::uint64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + "B";
  const char* const units = "KMGTPE";
  double value = static_cast<double>(bytes) / 1024;
  std::size_t unit = 0;
  while (value >= 1024 && unit + 1 < 6) {
    value /= 1024;
    ++unit;
  }
  // Three significant digits: 1.25M, 12.1M, 121M (rounding 1023.9K up to 1024K is fine).
  const char* format = value < 10 ? "%.2f%c" : value < 100 ? "%.1f%c" : "%.0f%c";
  char buf[32];
  std::snprintf(buf, sizeof buf, format, value, units[unit]);
  return buf;
}

std::string format_optional(const std::optional<double>& value, const char* format) {
  return value ? printf_text(format, *value) : "-";
}

std::string fit(const std::string& line, std::size_t width) {
  if (width == 0 || line.size() <= width) return line;
  if (width <= 3) return line.substr(0, width);
  return line.substr(0, width - 3) + "...";
}

Row make_row(const WatchTarget& target, const PeerTrack& track,
             const std::map<std::string, Verdict>& verdicts, Clock::time_point now) {
  Row row;
  const std::string id = member_id(target, track);
  row.rank = rank_text(target, track.ever_answered() ? track.last()->peer : "");
  row.host = host_text(target);
  const auto found = verdicts.find(id);
  const Verdict* verdict = found == verdicts.end() ? nullptr : &found->second;
  row.state = derive_state(track, verdict);
  if (track.answering()) {
    row.cells = cells_of(*track.last(), track.step_rate());
    // A peer we hear that its partners do not: its links to them are cut.
    if (verdict && (verdict->dead > 0 || verdict->suspect > 0)) {
      row.note = verdict_text(*verdict, false);
      row.tone = Tone::warn;
    }
    return row;
  }
  row.note = silent_note(track, verdict, now);
  row.tone = row.state == "ended" ? Tone::plain : Tone::bad;
  return row;
}

std::vector<std::string> table_lines(const std::vector<Row>& rows) {
  std::vector<std::size_t> lead(kLeadTitles.size()), cell(kCellTitles.size());
  for (std::size_t c = 0; c < lead.size(); ++c) lead[c] = kLeadTitles[c].size();
  for (std::size_t c = 0; c < cell.size(); ++c) cell[c] = kCellTitles[c].size();
  lead[2] = std::max<std::size_t>(lead[2], 9);  // "no answer", "bad reply"
  for (const Row& r : rows) {
    lead[0] = std::max(lead[0], r.rank.size());
    lead[1] = std::max(lead[1], r.host.size());
    lead[2] = std::max(lead[2], r.state.size());
    for (std::size_t c = 0; c < cell.size() && c < r.cells.size(); ++c)
      cell[c] = std::max(cell[c], r.cells[c].size());
  }
  const std::string gap(kGap, ' ');
  const auto line = [&](const std::vector<std::string>& first, const std::vector<std::string>& cells,
                        const std::string& note) {
    std::string out = pad(first[0], lead[0], true) + gap + pad(first[1], lead[1], false) + gap +
                      pad(first[2], lead[2], false);
    for (std::size_t c = 0; c < cells.size() && c < cell.size(); ++c)
      out += gap + pad(cells[c], cell[c], true);
    if (!note.empty()) out += gap + note;
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out;
  };
  std::vector<std::string> out;
  out.push_back(line(kLeadTitles, kCellTitles, "NOTE"));
  for (const Row& r : rows) out.push_back(line({r.rank, r.host, r.state}, r.cells, r.note));
  return out;
}

std::vector<Line> frame(const FrameInput& in) {
  std::vector<const PeerTrack*> tracks = *in.tracks;
  const std::map<std::string, Verdict> said = verdicts(tracks);
  std::vector<Row> rows;
  for (std::size_t i = 0; i < in.targets->size(); ++i)
    rows.push_back(make_row((*in.targets)[i], *tracks[i], said, in.now));
  // By rank where ranks are numbers (a targets file lists them so anyway), the others after
  // them as given.
  const auto key = [](const Row& r) {
    const bool number =
        !r.rank.empty() && r.rank.size() < 10 && r.rank.find_first_not_of("0123456789") == std::string::npos;
    return std::pair<int, long>(number ? 0 : 1, number ? std::stol(r.rank) : 0L);
  };
  std::stable_sort(rows.begin(), rows.end(), [&](const Row& a, const Row& b) { return key(a) < key(b); });
  std::vector<Line> out{header_line(in), {"", Tone::plain}};
  const std::vector<std::string> table = table_lines(rows);
  out.push_back({table[0], Tone::title});
  for (std::size_t r = 0; r < rows.size(); ++r) out.push_back({table[r + 1], rows[r].tone});
  if (rows.empty()) out.push_back({"(no targets yet: the targets file lists no peers)", Tone::warn});
  const std::vector<Line> unwatched = unwatched_lines(in, said);
  if (!unwatched.empty() || !in.warnings.empty()) out.push_back({"", Tone::plain});
  out.insert(out.end(), unwatched.begin(), unwatched.end());
  for (const std::string& w : in.warnings) out.push_back({"warning: " + w, Tone::warn});
  return out;
}

}  // namespace hearsay::watch
