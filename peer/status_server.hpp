// `hearsay peer --http [HOST]:PORT`: a small HTTP server on its own thread (Asio) that
// answers GET /metrics with Prometheus text and GET /status with a JSON object, both
// from a snapshot the peer provides. Anything else gets 404 (unknown path), 405
// (another method) or 400 (not HTTP, or a request head over 8 KiB); a client that
// sends nothing is dropped after 5 s. The server never touches training state itself:
// the snapshot function is its only view, called once per request.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "peer/metrics.hpp"

namespace hearsay {

struct HttpListen {
  std::string host;  // "0.0.0.0" when the flag gave only ":PORT"
  std::uint16_t port = 0;
};
// Parses ":PORT", "PORT" or "HOST:PORT" ("[::1]:PORT" for IPv6); port 0 means any free
// port. Throws std::invalid_argument naming the value and the expected form.
HttpListen parse_http_listen(const std::string& value);

class StatusServer {
 public:
  struct Snapshot {
    PeerMetrics metrics;
    nlohmann::json status;  // extra fields for /status (members, algorithm, ...)
  };
  using SnapshotFn = std::function<Snapshot()>;

  // Starts listening at once; throws std::runtime_error when the address cannot be
  // bound (port in use, no such interface), naming it.
  StatusServer(const std::string& listen, SnapshotFn snapshot);
  // Stops the thread; requests in flight are dropped. Never throws.
  ~StatusServer();
  StatusServer(const StatusServer&) = delete;
  StatusServer& operator=(const StatusServer&) = delete;

  // The bound port (the chosen one when listening on port 0).
  std::uint16_t port() const noexcept;
  std::uint64_t requests_served() const noexcept;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace hearsay
