// The checks that peer_config.cpp's flag handling and peer_config_validate.cpp's validate()
// share: each throws std::invalid_argument with a message that says what to write.
#pragma once
#include <charconv>
#include <stdexcept>
#include <string>
#include <string_view>

#include "gossip/network/transport/keys.hpp"

namespace hearsay::config_checks {

inline void require(bool ok, const std::string& message) {
  if (!ok) throw std::invalid_argument(message);
}

// Port number of "...:PORT" text; -1 when the text after the colon is not a number.
inline int parse_port(std::string_view digits) {
  int port = -1;
  const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), port);
  if (digits.empty() || r.ec != std::errc() || r.ptr != digits.data() + digits.size()) return -1;
  return port;
}

struct HostPort {
  std::string host;
  int port = 0;
};

// "tcp://HOST:PORT" (a CURVE key after '#' allowed when with_key) or "ipc://PATH"; the
// std::invalid_argument names flag and says what to write.
inline HostPort check_address(const std::string& flag, const std::string& text, bool with_key) {
  const std::string quoted = flag + " '" + text + "'";
  std::string_view rest = text;
  if (rest.rfind("ipc://", 0) == 0) {
    require(rest.size() > 6, quoted + " has no path: use ipc://PATH or tcp://HOST:PORT");
    return {};
  }
  require(rest.rfind("tcp://", 0) == 0, quoted + " is not an address: use tcp://HOST:PORT");
  rest.remove_prefix(6);
  if (with_key) {
    // The key is the last 40 characters after a '#' (Z85 itself may hold '#').
    const std::size_t n = transport::kCurveKeyZ85Chars;
    if (rest.size() > n && rest[rest.size() - n - 1] == '#') rest.remove_suffix(n + 1);
  }
  require(rest.find('#') == std::string_view::npos,
          quoted + " has a '#' that does not start a 40-character public key: use tcp://HOST:PORT[#KEY]");
  const std::size_t colon = rest.rfind(':');
  const bool bracketed = !rest.empty() && rest.front() == '[';
  if (colon == std::string_view::npos || (bracketed && rest[colon - 1] != ']'))
    throw std::invalid_argument(quoted + " has no port: use tcp://HOST:PORT");
  const std::string_view port_text = rest.substr(colon + 1);
  // A listening peer may let the system choose its port ('*'); a seed has a real one.
  const bool any_port = flag == "--listen" && port_text == "*";
  HostPort hp{std::string(rest.substr(0, colon)), any_port ? 0 : parse_port(port_text)};
  require(!hp.host.empty(),
          quoted + " has no host: use tcp://HOST:PORT (tcp://0.0.0.0:PORT to listen on every interface)");
  require(any_port || (hp.port >= 1 && hp.port <= 65535),
          quoted + " has port '" + std::string(port_text) + "': use a port in 1..65535" +
              (flag == "--listen" ? " (or * to let the system choose one)" : ""));
  return hp;
}

}  // namespace hearsay::config_checks
