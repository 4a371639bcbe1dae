// An emulated network link, as the simulator's --link and link faults write it and as a
// peer's link emulation applies it: "RATE,DELAY[,loss=P][,dup=P][,reorder=P]", e.g.
// "1gbit,1ms", "1mbit,20ms,loss=0.05" or "1gbit,1ms,dup=0.1,reorder=0.1".
//   RATE      bits per second with a unit: bit, kbit, mbit, gbit (SI, as tc netem writes
//             them; 1mbit = 10^6 bit/s), e.g. 100mbit or 2.5gbit; "unlimited" for no limit.
//   DELAY     one-way delay with a unit: us, ms or s, e.g. 1ms, 0.5ms, 0s.
//   loss=P    the probability, in [0, 1), that one message is lost; 0 when not given.
//   dup=P     the probability, in [0, 1), that one message arrives twice (netem's
//             duplicate: a retransmission whose original was not lost after all).
//   reorder=P the probability, in [0, 1), that one message is held back kReorderHold
//             longer than the link's delay, so that what is sent after it overtakes it.
// The options after DELAY come in any order, each at most once.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace hearsay::emulation {

struct LinkSpec {
  double bits_per_second = 0;  // 0: unlimited
  double delay_seconds = 0;
  double loss = 0;
  double dup = 0;
  double reorder = 0;

  // How much longer than the link's delay a reordered message is held: long enough for a
  // message sent a round later to overtake it, short enough not to look lost.
  static constexpr double kReorderHold = 0.010;

  bool operator==(const LinkSpec&) const = default;
  // Whether the link changes anything at all.
  bool emulated() const noexcept {
    return bits_per_second > 0 || delay_seconds > 0 || loss > 0 || dup > 0 || reorder > 0;
  }
  // Seconds a message of `bytes` occupies the link (0 when unlimited).
  double transmit_seconds(std::uint64_t bytes) const noexcept {
    return bits_per_second > 0 ? static_cast<double>(bytes) * 8.0 / bits_per_second : 0.0;
  }
  // The link a message between two peers crosses: the slower rate, the longer delay and
  // both losses, duplications and reorderings (each peer's spec describes its own access
  // link).
  static LinkSpec between(const LinkSpec& a, const LinkSpec& b) noexcept;
};

// Parses "RATE,DELAY[,loss=P][,dup=P][,reorder=P]". Throws std::invalid_argument naming
// the text and saying what was expected.
LinkSpec parse_link_spec(std::string_view text);
// The canonical text of a spec ("1gbit,1ms", "1mbit,20ms,loss=0.05"): parse_link_spec of
// it gives the same spec back.
std::string to_string(const LinkSpec& spec);

}  // namespace hearsay::emulation
