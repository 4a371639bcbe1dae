#include "gossip/network/membership/member_list.hpp"

#include <charconv>
#include <set>

#include "gossip/network/wire/header.hpp"

namespace hearsay::membership {

namespace {

bool printable(char c) { return c >= 0x20 && c < 0x7f; }

// A decimal uint64 without sign or leading zeros, ending at the next ':'.
std::optional<std::uint64_t> take_number(std::string_view& text) {
  const auto colon = text.find(':');
  if (colon == std::string_view::npos || colon == 0 || colon > 20) return std::nullopt;
  const std::string_view digits = text.substr(0, colon);
  if (digits.size() > 1 && digits.front() == '0') return std::nullopt;
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (error != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  text.remove_prefix(colon + 1);
  return value;
}

}  // namespace

bool valid_member_id(std::string_view id) {
  if (id.empty() || id.size() > wire::kMaxIdBytes || id.front() == '\0') return false;
  for (char c : id)
    if (c == '=' || (static_cast<unsigned char>(c) < 0x20) || c == 0x7f) return false;
  return true;
}

bool valid_member_address(std::string_view address) {
  if (address.empty() || address.size() > kMaxAddressBytes) return false;
  for (char c : address)
    if (!printable(c)) return false;
  return true;
}

std::string encode_entry(const Entry& entry) {
  return std::to_string(entry.incarnation) + ":" + std::to_string(entry.heartbeat) + ":" + entry.id + "=" +
         entry.address;
}

std::optional<Entry> parse_entry(std::string_view text) {
  Entry entry;
  auto incarnation = take_number(text);
  if (!incarnation) return std::nullopt;
  auto heartbeat = take_number(text);
  if (!heartbeat) return std::nullopt;
  const auto equals = text.find('=');
  if (equals == std::string_view::npos) return std::nullopt;
  const std::string_view id = text.substr(0, equals);
  const std::string_view address = text.substr(equals + 1);
  if (!valid_member_id(id) || !valid_member_address(address)) return std::nullopt;
  entry.incarnation = *incarnation;
  entry.heartbeat = *heartbeat;
  entry.id = id;
  entry.address = address;
  return entry;
}

ParsedList parse_list(std::span<const std::string> texts) {
  ParsedList parsed;
  std::set<std::string> ids;
  parsed.entries.reserve(texts.size());
  for (const auto& text : texts) {
    auto entry = parse_entry(text);
    if (!entry || !ids.insert(entry->id).second) {
      ++parsed.malformed;
      continue;
    }
    parsed.entries.push_back(std::move(*entry));
  }
  return parsed;
}

std::vector<std::string> encode_list(std::span<const Entry> entries, std::size_t max_bytes) {
  std::vector<std::string> texts;
  std::size_t bytes = 0;
  for (const auto& entry : entries) {
    std::string text = encode_entry(entry);
    // Each str costs its bytes plus at most 5 bytes of MessagePack framing.
    if (!texts.empty() && (bytes + text.size() + 5 > max_bytes || texts.size() >= 4096)) break;
    bytes += text.size() + 5;
    texts.push_back(std::move(text));
  }
  return texts;
}

}  // namespace hearsay::membership
