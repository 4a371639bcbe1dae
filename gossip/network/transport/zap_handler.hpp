// The ZeroMQ Authentication Protocol handler (RFC 27) of one transport: a thread that
// answers libzmq's requests on inproc://zeromq.zap.01 of that transport's context,
// accepting a CURVE client only when its public key is in the authorized set.
//
// libzmq consults it for every CURVE handshake on a socket of the context. It must be
// bound before the first CURVE server socket binds; without a handler libzmq would
// accept every CURVE client.
#pragma once
#include <cstddef>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <zmq.hpp>

#include "gossip/network/transport/keys.hpp"

namespace hearsay::transport {

// Logs a refused client (a key: who and from which host) on its 1st, 2nd, 4th, 8th...
// refusal, with the count, so a client retrying every 100 ms cannot flood the log (one
// with a wrong server key, keyed by its ephemeral port, logged 47 lines in 6 s); beyond
// kRemembered distinct keys one line says that further refusals are only counted.
// Thread-safe.
class RefusalLog {
 public:
  explicit RefusalLog(std::string transport_id) : transport_id_(std::move(transport_id)) {}
  // Counts a refusal of `key` and logs `what` (a full sentence) when its count is a power of 2.
  void refuse(const std::string& key, const std::string& what);
  std::size_t refusals() const;

 private:
  static constexpr std::size_t kRemembered = 1024;
  std::string transport_id_;
  mutable std::mutex mutex_;
  std::map<std::string, std::uint64_t> counts_;
  std::size_t refusals_ = 0;
  std::size_t unlogged_ = 0;
};

class ZapHandler {
 public:
  // Binds the ZAP endpoint in context (TransportError when another handler holds it)
  // and starts the thread.
  ZapHandler(zmq::context_t& context, transport::AuthorizedKeys authorized, RefusalLog& refusals);
  // Stops and joins the thread.
  ~ZapHandler();
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;

 private:
  void run();
  void answer(std::vector<zmq::message_t>& request);

  transport::AuthorizedKeys authorized_;
  RefusalLog& refusals_;
  zmq::socket_t socket_;
  zmq::socket_t stop_tx_, stop_rx_;
  std::thread thread_;
};

}  // namespace hearsay::transport
