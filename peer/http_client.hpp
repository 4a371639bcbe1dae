// A small HTTP/1.1 GET client (Asio) for `hearsay watch`: many URLs at once, each bounded
// in time and size, so that one slow or broken peer never holds up the others. Plain
// HTTP only (the peers' --http server); every failure is a reply with the reason in
// words, never an exception: "connection refused", "timed out after 800ms", "bad reply:
// HTTP 404", "bad reply: over 4 MiB".
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace hearsay {

struct HttpUrl {
  std::string host;  // a name or an address; IPv6 without brackets
  std::uint16_t port = 80;
  std::string path = "/status";
  // "http://HOST:PORT/PATH", with brackets around an IPv6 address.
  std::string text() const;
  // "HOST:PORT", the same way.
  std::string host_port() const;
  bool operator==(const HttpUrl&) const = default;
};

// "http://HOST[:PORT][/PATH]", "HOST:PORT" or ":PORT" (this machine), with "[::1]" for an
// IPv6 address. An empty path, "/" or "/metrics" (the Prometheus URL of a peer) become
// `default_path`. std::invalid_argument naming the value and the forms otherwise
// (https, no host, a port that is no number or above 65535, spaces).
HttpUrl parse_http_url(std::string_view text, std::string_view default_path = "/status");

struct HttpReply {
  bool answered = false;  // a whole HTTP reply came (whatever its status code)
  int status = 0;         // 200, 404, ...
  std::string body;
  std::string error;  // why there is no usable reply: set whenever status is not 200
  bool ok() const { return answered && status == 200 && error.empty(); }
};

// A reply read whole (the connection closed, or Content-Length satisfied) as its status
// and body: chunked transfer decoded, a body over max_body refused. The reply's error
// says what is wrong ("bad reply: not HTTP", "bad reply: HTTP 500 Internal Server
// Error", ...).
HttpReply parse_http_reply(std::string_view raw, std::size_t max_body);
// True when `raw` holds a whole reply per its Content-Length (without one, only the end
// of the connection says).
bool http_reply_complete(std::string_view raw);

class HttpClient {
 public:
  HttpClient();
  // Abandons whatever is in flight. Never throws.
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // GETs every URL at once and returns one reply per URL, in order, when all have
  // answered or `timeout` has passed; a URL still going then gets "timed out after T".
  std::vector<HttpReply> get_all(const std::vector<HttpUrl>& urls, std::chrono::nanoseconds timeout,
                                 std::size_t max_body);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace hearsay
