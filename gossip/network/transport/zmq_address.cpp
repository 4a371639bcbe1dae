// Peer addresses of the ZeroMQ transport: "endpoint" or "endpoint#<server key>".
#include <string_view>

#include "gossip/network/transport/keys.hpp"
#include "gossip/network/transport/zmq_transport.hpp"

namespace hearsay::transport {

namespace {
constexpr std::size_t kKeyChars = transport::kCurveKeyZ85Chars;

std::string usage(const std::string& address) {
  return "address '" + address +
         "' does not parse: expected tcp://HOST:PORT or ipc://PATH, followed by #<the peer's 40-character "
         "CURVE public key> when CURVE is on";
}
}  // namespace

ParsedAddress parse_address(const std::string& address) {
  ParsedAddress parsed{address, {}};
  // The key is the last 40 characters after a '#': Z85 may itself contain '#'.
  if (address.size() > kKeyChars + 1 && address[address.size() - kKeyChars - 1] == '#') {
    parsed.server_key = address.substr(address.size() - kKeyChars);
    parsed.endpoint = address.substr(0, address.size() - kKeyChars - 1);
    if (!transport::binary_from_z85(parsed.server_key))
      throw TransportError("address '" + address + "': '" + parsed.server_key + "' is not a Z85 CURVE key");
  }
  const std::string_view endpoint = parsed.endpoint;
  if (endpoint.starts_with("tcp://")) {
    const auto colon = endpoint.rfind(':');
    const bool has_port = colon != std::string_view::npos && colon > 6 && colon + 1 < endpoint.size();
    // '#' never belongs to a tcp endpoint: a key of the wrong length was appended.
    if (!has_port || endpoint.find_first_of("#*") != std::string_view::npos)
      throw TransportError(usage(address));
  } else if (endpoint.starts_with("ipc://")) {
    if (endpoint.size() == 6 || endpoint == "ipc://*") throw TransportError(usage(address));
  } else {
    throw TransportError(usage(address));
  }
  return parsed;
}

std::string format_address(const std::string& endpoint, const std::string& server_key) {
  return server_key.empty() ? endpoint : endpoint + "#" + server_key;
}

}  // namespace hearsay::transport
