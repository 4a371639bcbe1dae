#include "sim/fault_spec.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <map>
#include <stdexcept>

#include "gossip/mixing/topology/topology.hpp"
#include "gossip/network/emulation/spec_text.hpp"

namespace hearsay::sim {
namespace {

using emulation::split_trimmed;
using emulation::trim;

std::string in_quotes(std::string_view s) { return "'" + std::string(s) + "'"; }

std::string number_text(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

struct KindForm {
  Fault::Kind kind;
  std::string_view name;
  std::string_view expected;  // the form and an example, for messages
};
constexpr std::array<KindForm, 7> kKinds{{
    {Fault::Kind::kill, "kill", "kill:PEER@T, e.g. kill:3@30s"},
    {Fault::Kind::restart, "restart", "restart:PEER@T, e.g. restart:3@2ep"},
    {Fault::Kind::slow, "slow", "slow:PEER:Fx[@T], e.g. slow:2:3x or slow:2:3x@30s"},
    {Fault::Kind::link, "link",
     "link:PEER:RATE,DELAY[,loss=P][,dup=P][,reorder=P][@T[..T2]], e.g. link:3:1mbit,20ms,loss=0.05 or "
     "link:3:1mbit,20ms@1ep..2ep"},
    {Fault::Kind::partition, "partition",
     "partition:GROUP|GROUP[|...]@T..T2, e.g. partition:0-3|4-7@30s..60s"},
    {Fault::Kind::freeze, "freeze", "freeze:PEER@T..T2, e.g. freeze:2@30s..50s"},
    {Fault::Kind::disk_full, "disk-full", "disk-full:PEER@T[..T2], e.g. disk-full:1@1ep..2ep"},
}};
constexpr std::string_view kAnyKind =
    "kill:PEER@T, restart:PEER@T, slow:PEER:Fx[@T], "
    "link:PEER:RATE,DELAY[,loss=P][,dup=P][,reorder=P][@T[..T2]] or "
    "partition:GROUP|GROUP@T..T2, freeze:PEER@T..T2 or disk-full:PEER@T[..T2], e.g. kill:3@30s";

struct TimeUnit {
  std::string_view suffix;
  FaultTime::Unit unit;
  double scale;  // to seconds or epochs
};
// Two-letter suffixes first, so that "500ms" is not read as "500m" followed by "s".
constexpr std::array<TimeUnit, 4> kTimeUnits{{{"ms", FaultTime::Unit::seconds, 1e-3},
                                              {"ep", FaultTime::Unit::epochs, 1.0},
                                              {"s", FaultTime::Unit::seconds, 1.0},
                                              {"m", FaultTime::Unit::seconds, 60.0}}};

// Reads the parts of one fault; every failure names the fault as written and its form.
class FaultReader {
 public:
  FaultReader(std::string_view text, std::string_view expected) : text_(text), expected_(expected) {}

  [[noreturn]] void fail(const std::string& why) const {
    throw std::invalid_argument("fault " + in_quotes(text_) + ": " + why + "; expected " +
                                std::string(expected_));
  }

  // A non-negative integer below topology::kMaxPeers (which also bounds the ranges of a
  // partition, so that "0-999999999" cannot make a billion-element group).
  int rank(std::string_view part, std::string_view what) const {
    if (part.empty()) fail(std::string(what) + " is missing");
    int value = -1;
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), value);
    const bool digits = std::isdigit(static_cast<unsigned char>(part.front())) != 0;
    if (!digits || end != part.data() + part.size() ||
        (ec != std::errc() && ec != std::errc::result_out_of_range))
      fail(std::string(what) + " " + in_quotes(part) + " is not a rank");
    if (ec == std::errc::result_out_of_range || value >= topology::kMaxPeers)
      fail(std::string(what) + " " + in_quotes(part) + " is above the largest rank a run can have, " +
           std::to_string(topology::kMaxPeers - 1));
    return value;
  }

  FaultTime time(std::string_view part, std::string_view what) const {
    if (part.empty()) fail(std::string(what) + " is missing");
    const std::string forms = " (write a number with a unit: 500ms, 30s, 2m or 1.5ep)";
    for (const auto& unit : kTimeUnits) {
      if (part.size() <= unit.suffix.size() || !part.ends_with(unit.suffix)) continue;
      const std::string_view number = part.substr(0, part.size() - unit.suffix.size());
      double value = 0;
      const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
      if (ec != std::errc() || end != number.data() + number.size()) break;
      if (!std::isfinite(value) || value < 0)
        fail(std::string(what) + " " + in_quotes(part) + " must be a finite time, 0 or later" + forms);
      return {unit.unit, value * unit.scale};
    }
    fail(std::string(what) + " " + in_quotes(part) + " is not a time" + forms);
  }

 private:
  std::string_view text_;
  std::string_view expected_;
};

void read_kill_or_restart(const FaultReader& reader, std::string_view args, Fault& fault) {
  const auto at = args.find('@');
  if (at == std::string_view::npos) reader.fail("the time @T is missing");
  fault.peer = reader.rank(trim(args.substr(0, at)), "PEER");
  fault.at = reader.time(trim(args.substr(at + 1)), "T");
}

void read_slow(const FaultReader& reader, std::string_view args, Fault& fault) {
  const auto at = args.find('@');
  const std::string_view body = args.substr(0, at);
  const auto colon = body.find(':');
  fault.peer = reader.rank(trim(body.substr(0, colon)), "PEER");
  if (colon == std::string_view::npos) reader.fail("the factor :Fx is missing");
  const std::string_view factor = trim(body.substr(colon + 1));
  if (factor.empty()) reader.fail("the factor F is missing");
  if (factor.back() != 'x')
    reader.fail("factor " + in_quotes(factor) + " needs an x after the number, e.g. 3x");
  const std::string_view number = factor.substr(0, factor.size() - 1);
  const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), fault.slowdown);
  if (number.empty() || ec != std::errc() || end != number.data() + number.size())
    reader.fail("factor " + in_quotes(factor) + " is not a number followed by x");
  if (!std::isfinite(fault.slowdown) || fault.slowdown < 1)
    reader.fail("factor " + in_quotes(factor) +
                " must be at least 1x (1x: full speed, 3x: three times slower)");
  if (at != std::string_view::npos) fault.at = reader.time(trim(args.substr(at + 1)), "T");
}

void read_span(const FaultReader& reader, std::string_view times, Fault& fault);

void read_link(const FaultReader& reader, std::string_view args, Fault& fault) {
  const auto colon = args.find(':');
  fault.peer = reader.rank(trim(args.substr(0, colon)), "PEER");
  if (colon == std::string_view::npos) reader.fail("the link :RATE,DELAY is missing");
  const auto at = args.find('@', colon);
  try {
    fault.link = emulation::parse_link_spec(trim(args.substr(colon + 1, at - colon - 1)));
  } catch (const std::invalid_argument& e) {
    reader.fail(e.what());
  }
  fault.to_the_end = true;  // without @T: the whole run
  if (at == std::string_view::npos) return;
  const std::string_view times = args.substr(at + 1);
  if (times.find("..") != std::string_view::npos) {
    fault.to_the_end = false;
    return read_span(reader, times, fault);
  }
  fault.at = reader.time(trim(times), "T");
}

// "0-3", "0,2,4", "1,3,5-7": the ranks of one group, sorted. `owner` maps each rank seen
// so far to the text of its group, to refuse a rank listed twice.
std::vector<int> read_group(const FaultReader& reader, std::string_view group,
                            std::map<int, std::string_view>& owner) {
  if (group.empty()) reader.fail("a group is empty (two '|' in a row, or one at an end)");
  std::vector<int> ranks;
  for (const std::string_view item : split_trimmed(group, ',')) {
    if (item.empty()) reader.fail("group " + in_quotes(group) + " has an empty entry");
    int first = 0, last = 0;
    if (const auto dash = item.find('-'); dash != std::string_view::npos) {
      const std::string_view from = trim(item.substr(0, dash)), to = trim(item.substr(dash + 1));
      if (from.empty() || to.empty())
        reader.fail("range " + in_quotes(item) + " needs a rank on both sides of '-', e.g. 4-7");
      first = reader.rank(from, "group entry");
      last = reader.rank(to, "group entry");
      if (first > last)
        reader.fail("range " + in_quotes(item) + " runs backwards: write " + std::string(to) + "-" +
                    std::string(from));
    } else {
      first = last = reader.rank(item, "group entry");
    }
    for (int rank = first; rank <= last; ++rank) {
      const auto [it, inserted] = owner.emplace(rank, group);
      if (!inserted && it->second == group)
        reader.fail("rank " + std::to_string(rank) + " is listed twice in group " + in_quotes(group));
      if (!inserted)
        reader.fail("rank " + std::to_string(rank) + " is in two groups, " + in_quotes(it->second) + " and " +
                    in_quotes(group));
      ranks.push_back(rank);
    }
  }
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

// "T..T2" (what follows '@'; empty when there was no '@') into fault.at and fault.until.
void read_span(const FaultReader& reader, std::string_view times, Fault& fault) {
  if (times.empty()) reader.fail("the time @T..T2 is missing");
  const auto dots = times.find("..");
  if (dots == std::string_view::npos)
    reader.fail("the time " + in_quotes(trim(times)) + " is not a span T..T2");
  fault.at = reader.time(trim(times.substr(0, dots)), "T");
  fault.until = reader.time(trim(times.substr(dots + 2)), "T2");
  // Seconds and epochs only compare once the run knows how long an epoch takes, so a span
  // like 30s..2ep cannot be checked here.
  if (fault.at.unit == fault.until.unit && fault.until.value <= fault.at.value)
    reader.fail("it ends at T2 = " + to_string(fault.until) +
                ", which is not after it starts at T = " + to_string(fault.at));
}

void read_partition(const FaultReader& reader, std::string_view args, Fault& fault) {
  const auto at = args.find('@');
  const std::string_view groups = trim(args.substr(0, at));
  if (groups.empty()) reader.fail("the groups are missing");
  const auto group_texts = split_trimmed(groups, '|');
  if (group_texts.size() < 2)
    reader.fail(in_quotes(groups) + " is a single group: list at least two, separated by '|'");
  std::map<int, std::string_view> owner;
  for (const std::string_view group : group_texts) fault.groups.push_back(read_group(reader, group, owner));

  read_span(reader, at == std::string_view::npos ? std::string_view() : args.substr(at + 1), fault);
}

void read_freeze(const FaultReader& reader, std::string_view args, Fault& fault) {
  const auto at = args.find('@');
  fault.peer = reader.rank(trim(args.substr(0, at)), "PEER");
  read_span(reader, at == std::string_view::npos ? std::string_view() : args.substr(at + 1), fault);
}

void read_disk_full(const FaultReader& reader, std::string_view args, Fault& fault) {
  const auto at = args.find('@');
  fault.peer = reader.rank(trim(args.substr(0, at)), "PEER");
  if (at == std::string_view::npos) reader.fail("the time @T is missing");
  const std::string_view times = args.substr(at + 1);
  if (times.find("..") != std::string_view::npos) return read_span(reader, times, fault);
  fault.at = reader.time(trim(times), "T");
  fault.to_the_end = true;
}

Fault parse_fault(std::string_view text) {
  const auto colon = text.find(':');
  const std::string_view name = trim(text.substr(0, colon));
  const auto kind =
      std::find_if(kKinds.begin(), kKinds.end(), [&](const KindForm& k) { return k.name == name; });
  if (kind == kKinds.end()) FaultReader(text, kAnyKind).fail("unknown kind " + in_quotes(name));
  const FaultReader reader(text, kind->expected);
  if (colon == std::string_view::npos) reader.fail("nothing follows " + in_quotes(name));
  const std::string_view args = text.substr(colon + 1);

  Fault fault;
  fault.kind = kind->kind;
  fault.text = std::string(text);
  switch (fault.kind) {
    case Fault::Kind::kill:
    case Fault::Kind::restart:
      read_kill_or_restart(reader, args, fault);
      break;
    case Fault::Kind::slow:
      read_slow(reader, args, fault);
      break;
    case Fault::Kind::link:
      read_link(reader, args, fault);
      break;
    case Fault::Kind::partition:
      read_partition(reader, args, fault);
      break;
    case Fault::Kind::freeze:
      read_freeze(reader, args, fault);
      break;
    case Fault::Kind::disk_full:
      read_disk_full(reader, args, fault);
      break;
  }
  return fault;
}

// Whether time `t` falls in [p.at, p.until) of partition p; false when the units differ,
// since seconds and epochs are not comparable before the run.
bool falls_within(const FaultTime& t, const Fault& p) {
  if (p.to_the_end) return t.unit == p.at.unit && t.value >= p.at.value;
  return t.unit == p.at.unit && t.unit == p.until.unit && t.value >= p.at.value && t.value < p.until.value;
}

[[noreturn]] void refuse(const Fault& fault, const std::string& why) {
  throw std::invalid_argument("fault " + in_quotes(fault.text) + ": " + why);
}

}  // namespace

std::string to_string(const FaultTime& time) {
  return number_text(time.value) + (time.unit == FaultTime::Unit::epochs ? "ep" : "s");
}

std::string_view to_string(Fault::Kind kind) {
  for (const auto& k : kKinds)
    if (k.kind == kind) return k.name;
  return "unknown";
}

std::vector<Fault> parse_faults(std::string_view spec) {
  std::vector<Fault> faults;
  for (const std::string_view text : split_trimmed(spec, ';'))
    if (!text.empty()) faults.push_back(parse_fault(text));
  return faults;
}

void check_faults(const std::vector<Fault>& faults, int peers) {
  if (peers < 1)
    throw std::invalid_argument("a run of " + std::to_string(peers) + " peers has no peer to fault");
  const auto check_rank = [peers](const Fault& fault, int rank) {
    if (rank < 0 || rank >= peers)
      refuse(fault, "rank " + std::to_string(rank) + " is out of range: the run has peers 0.." +
                        std::to_string(peers - 1));
  };
  // One slowdown and one link per peer: a second one would silently replace the first.
  std::map<int, const Fault*> slow_of, link_of;
  std::vector<const Fault*> partitions, spans;
  for (const Fault& fault : faults) {
    if (fault.kind != Fault::Kind::partition) check_rank(fault, fault.peer);
    if (fault.kind == Fault::Kind::slow || fault.kind == Fault::Kind::link) {
      auto& seen = fault.kind == Fault::Kind::slow ? slow_of : link_of;
      const auto [it, inserted] = seen.emplace(fault.peer, &fault);
      if (!inserted)
        refuse(fault, "peer " + std::to_string(fault.peer) + " already has a " +
                          std::string(to_string(fault.kind)) + " fault, " + in_quotes(it->second->text) +
                          "; give each peer at most one");
    }
    if (fault.kind == Fault::Kind::freeze || fault.kind == Fault::Kind::disk_full) {
      // A peer is stopped (its disk full) or not: two at once would end at the first end.
      for (const Fault* other : spans)
        if (other->kind == fault.kind && other->peer == fault.peer &&
            (falls_within(fault.at, *other) || falls_within(other->at, fault)))
          refuse(fault, "it overlaps " + std::string(to_string(fault.kind)) + " " + in_quotes(other->text) +
                            " of the same peer in time");
      spans.push_back(&fault);
    }
    if (fault.kind != Fault::Kind::partition) continue;
    for (const auto& group : fault.groups)
      for (const int rank : group) check_rank(fault, rank);
    // The network is split one way at a time. Two spans overlap exactly when one starts
    // within the other; that is only known where the units agree.
    for (const Fault* other : partitions)
      if (falls_within(fault.at, *other) || falls_within(other->at, fault))
        refuse(fault, "it overlaps partition " + in_quotes(other->text) +
                          " in time; let one end before the next starts");
    partitions.push_back(&fault);
  }
}

}  // namespace hearsay::sim
