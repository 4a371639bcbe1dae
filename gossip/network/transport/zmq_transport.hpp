// The ZeroMQ transport: tcp:// and ipc://, with CurveZMQ encryption and authentication.
//
// Sockets. Each peer binds one ROUTER socket; incoming messages arrive there as
// [routing id][header][payload?], and the routing id is the id the sender connected
// with (a header whose `sender` differs is dropped as spoofed_sender). For each peer it
// connect()s to it opens one DEALER with routing id = its own id, watched by a socket
// monitor, so a lost connection or a refused handshake becomes a PeerError naming that
// peer. send() goes through that DEALER; to a peer that only connected to us (e.g. a
// reply), through the ROUTER, which has ZMQ_ROUTER_MANDATORY set so an unknown peer is a
// PeerError instead of a silent drop. Every socket is owned by one background I/O
// thread; callers hand it commands through a queue and an inproc PAIR wake-up.
//
// Limits. ZMQ_MAXMSGSIZE is set to the header bound plus max_payload_bytes, so ZeroMQ
// refuses larger frames before allocating them (it drops that connection). The inbox is
// bounded; while it is full the I/O thread stops reading and ZeroMQ pushes back.
//
// Addresses. address() is the bound endpoint with the port read back (bind
// "tcp://127.0.0.1:*"), and with CURVE "#<server public key, 40 Z85 chars>" appended:
//   tcp://10.0.0.5:41234#rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7
// connect() takes the same form: the key is the one the DEALER must expect from the
// ROUTER (ZMQ_CURVE_SERVERKEY). Without CURVE the address is the bare endpoint, and an
// address carrying a key is refused (the peer expects CURVE). The key is always the last
// 40 characters after a '#' (Z85 itself may contain '#').
//
// Security. With keys, the ROUTER is a CURVE server and every DEALER a CURVE client
// with the same key pair. A ZAP handler (RFC 27, inproc://zeromq.zap.01 of this
// transport's context) accepts only clients whose public key is in the authorized
// directory; other keys, and clients that do not speak CURVE at all, are refused and
// logged once per key and address. Plain TCP needs insecure = true and logs a warning.
//
// Link emulation and partitions are not here: they wrap this transport from outside
// (gossip/network/emulation/emulated_transport.hpp), through transmit() and the Tap.
#pragma once
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gossip/network/transport/keys.hpp"
#include "gossip/network/transport/transport.hpp"

namespace hearsay::transport {

struct Security {
  std::filesystem::path keys_dir;        // holds peer.secret (transport::load_keypair)
  std::filesystem::path authorized_dir;  // the *.pub files of the peers we accept
  bool insecure = false;                 // plain TCP/IPC: no encryption, no authentication
  // Keys already in memory take the place of the directories when set.
  std::optional<transport::CurveKeyPair> keypair;
  std::optional<transport::AuthorizedKeys> authorized;
};

struct ZmqOptions {
  std::string id;  // routing identity: 1-255 bytes, no leading zero byte
  std::string bind = "tcp://127.0.0.1:*";
  wire::Expectation expect;  // run id and model fingerprint we accept
  Security security;
  // Largest payload frame accepted (bytes); size it to the model: 4 * parameters.
  std::uint64_t max_payload_bytes = std::uint64_t{1} << 30;
  Inbox::Limits inbox{};
  std::chrono::milliseconds connect_timeout{10'000};  // connect() -> PeerError(unreachable)
  // A silent connection is found dead by TCP keepalive probes (first after `keepalive_idle`
  // of silence, then every `keepalive_interval`; dead after `keepalive_probes` unanswered),
  // not by ZMTP heartbeats: libzmq 4.3.4 aborts the process (assertion !_io_error in
  // stream_engine_base.cpp) when a heartbeat timer fires on a connection whose peer closed
  // while its input was paused by a full receive queue: our backpressure, by design.
  std::chrono::seconds keepalive_idle{5};
  std::chrono::seconds keepalive_interval{1};
  int keepalive_probes = 5;
  int send_queue = 64;                      // messages queued per peer before send() refuses
  int socket_buffer_bytes = 0;              // SO_SNDBUF/SO_RCVBUF; 0 keeps the OS autotuning
  int io_threads = 1;                       // ZeroMQ I/O threads of this transport's context
  std::chrono::milliseconds linger{1'000};  // how long close waits to flush queued messages
};

struct ParsedAddress {
  std::string endpoint;    // what zmq_connect takes
  std::string server_key;  // Z85 public key of the peer's CURVE server, empty without
};
// Splits "endpoint[#key]"; TransportError for a malformed endpoint or key.
ParsedAddress parse_address(const std::string& address);
std::string format_address(const std::string& endpoint, const std::string& server_key);

class ZmqTransport final : public Transport {
 public:
  // Binds, starts the I/O (and ZAP) threads. Throws TransportError when the bind fails
  // or the security options are inconsistent, transport::KeyError for bad key files.
  explicit ZmqTransport(ZmqOptions options);
  // Stops the threads; queued outgoing messages get up to `linger` to leave.
  ~ZmqTransport() override;

  const std::string& id() const override;
  std::string address() const override;
  void connect(const std::string& peer_id, const std::string& address) override;
  void connect_seed(const std::string& key, const std::string& address) override;
  void transmit(const std::string& peer_id, wire::Header header, Payload payload) override;
  std::string address_of(const std::string& peer_id) const override;
  Counters counters() const override;
  // This peer's CURVE public key (Z85), empty when insecure.
  const std::string& public_key() const;

 private:
  void connect_as(const std::string& peer_id, const std::string& address, bool seed);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hearsay::transport
