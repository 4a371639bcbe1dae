// The text form of one membership entry, carried in the header's `members` array of
// hello, welcome, members and bye messages (docs/PROTOCOL.md, section "Membership"):
//
//   <incarnation>:<heartbeat>:<id>=<address>
//
// incarnation and heartbeat are decimal uint64 without sign or leading zeros (a lone
// "0" is fine); the id runs up to the first '=' and the address is everything after it
// (addresses may contain '=' and ':', ids may not contain '='). Entries come from
// untrusted peers: parsing checks every part and drops what does not fit.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hearsay::membership {

// Longest address an entry may carry (an endpoint plus a CURVE key is under 100).
inline constexpr std::size_t kMaxAddressBytes = 1024;
// The most bytes of entries one message carries, leaving room in the 64 KiB header.
inline constexpr std::size_t kMaxListBytes = 48 * 1024;

struct Entry {
  std::string id;
  std::string address;
  std::uint64_t incarnation = 0;  // a process's start; a restart brings a larger one
  std::uint64_t heartbeat = 0;    // the member's own counter, raised every heartbeat
  bool operator==(const Entry&) const = default;
};

// Whether an id can be a member: 1 to 255 bytes, not starting with a zero byte (a
// routing id), no '=' (the entry separator) and no control characters.
bool valid_member_id(std::string_view id);
// Whether an address can be gossiped: 1 to kMaxAddressBytes printable ASCII bytes.
bool valid_member_address(std::string_view address);

std::string encode_entry(const Entry& entry);
// nullopt for anything that does not follow the form above.
std::optional<Entry> parse_entry(std::string_view text);

struct ParsedList {
  std::vector<Entry> entries;
  std::size_t malformed = 0;  // entries dropped: unparseable, or an id already listed
};
ParsedList parse_list(std::span<const std::string> texts);

// Encodes entries in order until the next one would pass max_bytes; the first entry is
// always included (it is the sender's own).
std::vector<std::string> encode_list(std::span<const Entry> entries, std::size_t max_bytes = kMaxListBytes);

}  // namespace hearsay::membership
