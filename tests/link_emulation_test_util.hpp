// What the link emulation tests share.
#pragma once
#include <cstdint>
#include <string>

#include "gossip/network/emulation/link_emulator.hpp"
#include "gossip/network/emulation/link_spec.hpp"

namespace hearsay::emulation::testing {

// Links where only this endpoint's own link is set: `spec` (parse_link_spec), drawn with `seed`.
inline LinkEmulation own_link(const std::string& spec, std::uint64_t seed = 0) {
  LinkEmulation e;
  e.self = parse_link_spec(spec);
  e.seed = seed;
  return e;
}

}  // namespace hearsay::emulation::testing
