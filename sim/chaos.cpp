#include "sim/chaos.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <stdexcept>
#include <vector>

#include "base/rng.hpp"

namespace hearsay::sim {
namespace {

constexpr std::string_view kForm = "expected SEED[:RATE], e.g. 7 or 7:3 (RATE: faults per epoch, default 2)";

[[noreturn]] void refuse(std::string_view text, const std::string& why) {
  throw std::invalid_argument("--chaos '" + std::string(text) + "': " + why + "; " + std::string(kForm));
}

// Faults start from kFirst of the run, and every one that ends (a restart, a partition, a
// freeze, a full disk) has ended by kHealed: the last quarter is healthy, as Jepsen heals
// its nemeses for a final phase, so that the run shows whether it recovers, not only
// whether it survives. A peer killed for good, a slow peer and a slow link stay.
constexpr double kFirst = 0.05, kHealed = 0.75;

struct Span {
  double from = 0, to = 0;  // [from, to), in epochs
  bool overlaps(const Span& o) const { return from < o.to && o.from < to; }
};

std::string epochs(double t) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fep", t);
  return buf;
}

// Draws one schedule: what each peer is doing when (dead, frozen), so that every fault
// drawn can fire, and which peers already have their one slowdown and link.
class Drawer {
 public:
  Drawer(const ChaosSpec& chaos, int peers, double run_epochs)
      : rng_(chaos.seed ^ 0x63'68'61'6f'73ULL),
        peers_(peers),
        epochs_(run_epochs),
        away_(static_cast<std::size_t>(peers)) {}

  std::string draw(int count) {
    // Each kind by weight; a draw that cannot fire where it fell is drawn again.
    // kill+restart, kill, slow, link, partition, freeze, disk-full
    constexpr std::array<int, 7> kWeights{3, 1, 2, 1, 2, 2, 1};
    const int total = std::accumulate(kWeights.begin(), kWeights.end(), 0);
    for (int tries = 0; drawn_ < count && tries < 100 * count; ++tries) {
      int pick = static_cast<int>(rng_.below(static_cast<std::uint64_t>(total)));
      std::size_t kind = 0;
      while (pick >= kWeights[kind]) pick -= kWeights[kind++];
      switch (kind) {
        case 0:
          kill(true);
          break;
        case 1:
          kill(false);
          break;
        case 2:
          slow();
          break;
        case 3:
          link();
          break;
        case 4:
          partition();
          break;
        case 5:
          freeze();
          break;
        default:
          disk_full();
          break;
      }
    }
    std::string spec;
    for (const auto& [at, text] : faults_) spec += (spec.empty() ? "" : "; ") + text;
    return spec;
  }

 private:
  double time_in(double from, double to) { return from + (to - from) * rng_.uniform(); }
  int any_peer() { return static_cast<int>(rng_.below(static_cast<std::uint64_t>(peers_))); }
  double round2(double t) const { return std::round(t * 100) / 100; }
  void add(double at, std::string text, int faults = 1) {
    faults_.emplace(at, std::move(text));
    drawn_ += faults;
  }
  // Whether peer p is neither dead nor frozen during `s`.
  bool free(int p, const Span& s) const {
    return std::none_of(away_[static_cast<std::size_t>(p)].begin(), away_[static_cast<std::size_t>(p)].end(),
                        [&](const Span& a) { return a.overlaps(s); });
  }
  // Peers dead at some moment of `s`, counted at each death's start within it (enough: the
  // count only rises at a death's start).
  int most_dead_during(const Span& s) const {
    int most = 0;
    std::vector<double> starts{s.from};
    for (const Span& d : deaths_)
      if (d.from >= s.from && d.from < s.to) starts.push_back(d.from);
    for (const double t : starts)
      most = std::max(
          most, static_cast<int>(std::count_if(deaths_.begin(), deaths_.end(),
                                               [&](const Span& d) { return d.from <= t && t < d.to; })));
    return most;
  }

  void kill(bool comes_back) {
    if (peers_ < 3) return;
    const int p = any_peer();
    const double at = round2(time_in(kFirst, comes_back ? kHealed - 0.05 : kHealed) * epochs_);
    const double back = comes_back ? round2(at + time_in(0.05, 0.3) * epochs_) : epochs_ + 1;
    const Span dead{at, back};
    if (comes_back && back >= kHealed * epochs_) return;
    if (!free(p, dead) || most_dead_during(dead) + 1 > std::max(1, peers_ / 4)) return;
    away_[static_cast<std::size_t>(p)].push_back(dead);
    deaths_.push_back(dead);
    add(at, "kill:" + std::to_string(p) + "@" + epochs(at));
    if (comes_back) add(back, "restart:" + std::to_string(p) + "@" + epochs(back));
  }

  void slow() {
    const int p = any_peer();
    if (!slowed_.insert(p).second) return;
    const int factor = 2 + static_cast<int>(rng_.below(4));
    const double at = round2(time_in(kFirst, kHealed) * epochs_);
    add(at, "slow:" + std::to_string(p) + ":" + std::to_string(factor) + "x@" + epochs(at));
  }

  void link() {
    constexpr std::array<std::string_view, 4> kLinks{"100mbit,5ms", "1gbit,20ms", "200mbit,2ms", "1gbit,1ms"};
    constexpr std::array<std::string_view, 5> kLoss{"", ",loss=0.01", ",loss=0.05", ",dup=0.05,reorder=0.05",
                                                    ",loss=0.01,dup=0.02,reorder=0.1"};
    const int p = any_peer();
    if (!linked_.insert(p).second) return;
    const std::string spec =
        std::string(kLinks[rng_.below(kLinks.size())]) + std::string(kLoss[rng_.below(kLoss.size())]);
    if (rng_.below(2) == 0) {  // for the whole run, both ways
      add(0, "link:" + std::to_string(p) + ":" + spec);
      return;
    }
    // For a while: it turns slow or lossy, then heals.
    const double at = round2(time_in(kFirst, kHealed - 0.05) * epochs_);
    const double to = round2(at + time_in(0.05, 0.3) * epochs_);
    if (to >= kHealed * epochs_ || to <= at) {
      linked_.erase(p);
      return;
    }
    add(at, "link:" + std::to_string(p) + ":" + spec + "@" + epochs(at) + ".." + epochs(to));
  }

  void partition() {
    const double at = round2(time_in(kFirst, kHealed - 0.05) * epochs_);
    const Span cut{at, round2(at + time_in(0.05, 0.3) * epochs_)};
    if (cut.to >= kHealed * epochs_ || cut.to <= cut.from) return;
    if (std::any_of(partitions_.begin(), partitions_.end(), [&](const Span& s) { return s.overlaps(cut); }))
      return;
    std::vector<int> ranks(static_cast<std::size_t>(peers_));
    std::iota(ranks.begin(), ranks.end(), 0);
    for (std::size_t i = ranks.size() - 1; i > 0; --i) std::swap(ranks[i], ranks[rng_.below(i + 1)]);
    const auto split = 1 + rng_.below(ranks.size() - 1);
    std::vector<int> a(ranks.begin(), ranks.begin() + static_cast<std::ptrdiff_t>(split));
    std::vector<int> b(ranks.begin() + static_cast<std::ptrdiff_t>(split), ranks.end());
    const auto group = [](std::vector<int> g) {
      std::sort(g.begin(), g.end());
      std::string out;
      for (const int r : g) out += (out.empty() ? "" : ",") + std::to_string(r);
      return out;
    };
    partitions_.push_back(cut);
    add(at, "partition:" + group(a) + "|" + group(b) + "@" + epochs(cut.from) + ".." + epochs(cut.to));
  }

  void freeze() {
    const int p = any_peer();
    const double at = round2(time_in(kFirst, kHealed - 0.03) * epochs_);
    const Span frozen{at, round2(at + time_in(0.03, 0.2) * epochs_)};
    if (frozen.to >= kHealed * epochs_ || frozen.to <= frozen.from || !free(p, frozen)) return;
    away_[static_cast<std::size_t>(p)].push_back(frozen);
    add(at, "freeze:" + std::to_string(p) + "@" + epochs(frozen.from) + ".." + epochs(frozen.to));
  }

  void disk_full() {
    const int p = any_peer();
    if (!disk_filled_.insert(p).second) return;
    const double at = round2(time_in(kFirst, kHealed - 0.05) * epochs_);
    const double to = round2(at + time_in(0.05, 0.3) * epochs_);
    if (to >= kHealed * epochs_ || to <= at) return;
    add(at, "disk-full:" + std::to_string(p) + "@" + epochs(at) + ".." + epochs(to));
  }

  Rng rng_;
  const int peers_;
  const double epochs_;
  std::vector<std::vector<Span>> away_;  // by peer: when it is dead or frozen
  std::vector<Span> deaths_, partitions_;
  std::set<int> slowed_, linked_, disk_filled_;
  std::multimap<double, std::string> faults_;  // in time order
  int drawn_ = 0;
};

}  // namespace

ChaosSpec parse_chaos(std::string_view text) {
  ChaosSpec chaos;
  const auto colon = text.find(':');
  const std::string_view seed = text.substr(0, colon);
  const auto [end, ec] = std::from_chars(seed.data(), seed.data() + seed.size(), chaos.seed);
  if (seed.empty() || ec != std::errc() || end != seed.data() + seed.size())
    refuse(text, "SEED '" + std::string(seed) + "' is not a non-negative integer");
  if (colon == std::string_view::npos) return chaos;
  const std::string_view rate = text.substr(colon + 1);
  const auto [rend, rec] = std::from_chars(rate.data(), rate.data() + rate.size(), chaos.rate);
  if (rate.empty() || rec != std::errc() || rend != rate.data() + rate.size())
    refuse(text, "RATE '" + std::string(rate) + "' is not a number");
  if (!std::isfinite(chaos.rate) || chaos.rate <= 0 || chaos.rate > 100)
    refuse(text, "RATE '" + std::string(rate) + "' must be above 0 and at most 100 faults per epoch");
  return chaos;
}

std::string chaos_faults(const ChaosSpec& chaos, int peers, double epochs) {
  if (peers < 2) throw std::invalid_argument("--chaos needs at least 2 peers to fault");
  if (!(epochs > 0)) throw std::invalid_argument("--chaos needs a run of some epochs");
  const int count = std::max(1, static_cast<int>(std::lround(chaos.rate * epochs)));
  return Drawer(chaos, peers, epochs).draw(count);
}

}  // namespace hearsay::sim
