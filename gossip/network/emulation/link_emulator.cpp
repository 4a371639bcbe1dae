#include "gossip/network/emulation/link_emulator.hpp"

#include "base/rng.hpp"

namespace hearsay::emulation {

namespace {

// SplitMix64's finaliser: every input bit affects every output bit, so keys built from
// neighbouring seeds, ids and indices give unrelated draws.
std::uint64_t mix64(std::uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ULL;

LinkSchedule::Clock::duration to_duration(double seconds) {
  return std::chrono::round<LinkSchedule::Clock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace

bool LinkEmulation::enabled() const noexcept {
  if (self.emulated() || others.emulated()) return true;
  return std::any_of(peers.begin(), peers.end(), [](const auto& entry) { return entry.second.emulated(); });
}

LinkSpec LinkEmulation::link_to(const std::string& peer) const {
  const auto own = peers.find(peer);
  return LinkSpec::between(self, own != peers.end() ? own->second : others);
}

std::string describe(const LinkEmulation& emulation) {
  std::string text = "own link " + to_string(emulation.self) + "; others " + to_string(emulation.others);
  std::vector<std::pair<std::string, LinkSpec>> listed(emulation.peers.begin(), emulation.peers.end());
  std::sort(listed.begin(), listed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [id, spec] : listed) text += "; peer '" + id + "' " + to_string(spec);
  return text + "; loss seed " + std::to_string(emulation.seed);
}

LinkSchedule::LinkSchedule(LinkEmulation emulation, std::string_view self_id)
    : emulation_(std::move(emulation)),
      self_key_(mix64(mix64(emulation_.seed + kGolden) ^ stable_hash(self_id))) {}

LinkSchedule::Destination& LinkSchedule::destination(const std::string& peer) {
  auto it = destinations_.find(peer);
  if (it != destinations_.end()) return it->second;
  Destination d;
  d.link = emulation_.link_to(peer);
  d.delay = to_duration(d.link.delay_seconds);
  d.loss_key = mix64(self_key_ ^ mix64(stable_hash(peer) + kGolden));
  return destinations_.emplace(peer, d).first->second;
}

void LinkSchedule::set_self(const LinkSpec& self) {
  emulation_.self = self;
  for (auto& [peer, d] : destinations_) {
    d.link = emulation_.link_to(peer);
    d.delay = to_duration(d.link.delay_seconds);
  }
}

LinkSchedule::Slot LinkSchedule::take(const std::string& peer, std::uint64_t bytes, Clock::time_point now) {
  Destination& d = destination(peer);
  // The uplink at our own rate, then the path at the slower of the two access links: a
  // message to a slow peer keeps its path busy, not our uplink.
  const Clock::time_point departure = std::max(now, uplink_free_);
  uplink_free_ = departure + to_duration(emulation_.self.transmit_seconds(bytes));
  d.path_free = std::max(departure, d.path_free) + to_duration(d.link.transmit_seconds(bytes));
  Slot slot;
  slot.destination = &d;
  slot.release = std::max(uplink_free_, d.path_free) + d.delay;
  slot.index = d.sent++;
  slot.lost = draw_lost(d.loss_key, slot.index, d.link.loss);
  if (slot.lost) return slot;
  slot.duplicated = draw_lost(dup_key(d.loss_key), slot.index, d.link.dup);
  slot.reordered = draw_lost(reorder_key(d.loss_key), slot.index, d.link.reorder);
  if (slot.reordered) slot.release += to_duration(LinkSpec::kReorderHold);
  return slot;
}

std::uint64_t LinkSchedule::dup_key(std::uint64_t loss_key) noexcept {
  return mix64(loss_key ^ 0x64'75'70ULL);
}
std::uint64_t LinkSchedule::reorder_key(std::uint64_t loss_key) noexcept {
  return mix64(loss_key ^ 0x72'65'6f'72'64'65'72ULL);
}

bool LinkSchedule::draw_lost(std::uint64_t loss_key, std::uint64_t index, double p) noexcept {
  if (!(p > 0)) return false;
  const std::uint64_t bits = mix64(loss_key + (index + 1) * kGolden);
  const double uniform = static_cast<double>(bits >> 11) * 0x1.0p-53;  // [0, 1) with 53 bits
  return uniform < p;
}

}  // namespace hearsay::emulation
