// The --join addresses as the transport takes them, and the words of a join line that a
// peer prints for others to paste into a shell (peer_config.hpp declares both).
#include <algorithm>
#include <cctype>
#include <cstring>
#include <stdexcept>

#include "gossip/network/transport/keys.hpp"
#include "peer/peer_config.hpp"

namespace hearsay {

std::vector<std::string> join_addresses(const NetworkConfig& network) {
  if (network.join_key.empty()) return network.join;
  std::string key;
  try {
    key = transport::load_public_key(network.join_key);
  } catch (const transport::KeyError& e) {
    throw std::invalid_argument(std::string("--join-key: ") + e.what());
  }
  std::vector<std::string> out;
  for (const auto& seed : network.join) {
    const auto hash = seed.find('#');
    if (hash == std::string::npos) {
      out.push_back(seed + "#" + key);
      continue;
    }
    if (seed.substr(hash + 1) != key)
      throw std::invalid_argument("--join '" + seed + "' carries a key other than the one in --join-key " +
                                  network.join_key + ": give one of them");
    out.push_back(seed);
  }
  return out;
}

std::string shell_word(const std::string& text) {
  const bool plain = !text.empty() && std::all_of(text.begin(), text.end(), [](unsigned char c) {
    return std::isalnum(c) || std::strchr("-_./:,=@%+", c) != nullptr;
  });
  if (plain) return text;
  std::string out = "'";
  for (const char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace hearsay
