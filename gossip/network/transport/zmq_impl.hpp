// Internals of the ZeroMQ transport shared by zmq_transport.cpp (setup, the caller's
// side) and zmq_io.cpp (the I/O thread). Not part of the interface.
#pragma once

#include <atomic>
#include <cerrno>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>
#include <zmq.hpp>

#include "base/log.hpp"
#include "gossip/network/transport/zap_handler.hpp"
#include "gossip/network/transport/zmq_transport.hpp"

namespace hearsay::transport {

inline constexpr const char* kWakeEndpoint = "inproc://hearsay-wake";
inline constexpr const char* kRouterMonitorEndpoint = "inproc://hearsay-monitor-router";
inline constexpr int kLinkEvents = ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED |
                                   ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
inline constexpr int kRouterEvents = ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED |
                                     ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                     ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;

struct MonitorEvent {
  std::uint16_t event = 0;
  std::uint32_t value = 0;  // an fd, an errno, a protocol error or a ZAP status, by event
};

// Routing ids of raw clients may be any bytes: keep log lines readable.
std::string printable(std::string_view raw);
// zmq::poll that treats an interrupted call (EINTR) as a timeout.
inline int poll_sockets(zmq::pollitem_t* items, std::size_t count, std::chrono::milliseconds timeout) {
  try {
    return zmq::poll(items, count, timeout);
  } catch (const zmq::error_t& e) {
    if (e.num() != EINTR) throw;
    return 0;
  }
}

// Sets a CURVE key option from its Z85 text; TransportError when libzmq refuses it.
void set_key(zmq::socket_t& socket, int option, const std::string& z85);

struct Command {
  enum class Kind { connect, send, stop } kind = Kind::send;
  std::string peer;
  std::string address;
  ParsedAddress parsed;
  bool seed = false;  // connect: a joiner's hello connection (Route::joiner)
  zmq::message_t header, payload;
  bool has_payload = false;
  std::promise<void> done;
};

// A peer we connected to: its DEALER and the monitor that reports its connection.
struct Link {
  Link() = default;
  // Stops the dealer's monitor before either socket closes. libzmq's I/O thread sends
  // monitor events with a blocking send: a dealer closed (or still connecting) after
  // our end of the monitor pair is gone would block that thread, and with it every
  // socket of the context, forever.
  ~Link();
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;
  std::string peer_id, address;
  zmq::socket_t dealer, monitor;  // the monitor closes first (reverse order), after it was stopped
  enum class State { connecting, connected } state = State::connecting;
  Clock::time_point connect_deadline;
  bool reported = false;  // an error went out and no handshake succeeded since
  bool seed = false;      // a joiner's hello connection, under an identity of its own
};

struct ZmqTransport::Impl {
  Impl(ZmqOptions opts, Inbox& inbox, const ZmqTransport& owner);
  ~Impl();
  void start();
  std::future<void> submit(std::unique_ptr<Command> command);
  void wake_locked();

  // I/O thread.
  void run();
  void loop();
  bool run_commands();  // false on stop
  void connect_link(Command& command);
  void send_message(Command& command);
  enum class Handover { sent, unknown_peer, full };
  // Hands header (+ payload) to peer's DEALER, else to the ROUTER for a peer that only
  // connected to us; `address` is set to the peer's address for error messages.
  Handover send_frames(const std::string& peer, zmq::message_t& header, zmq::message_t& payload,
                       bool has_payload, std::string& address);
  void read_socket(zmq::socket_t& socket, const Link* link);
  void accept(const std::string& identity, std::size_t frames, zmq::message_t& header,
              zmq::message_t& payload, zmq::socket_t& socket, const Link* link);
  // A joiner's hello whose id is taken here (by this peer, or by a peer connected from
  // another address): why, or "" when it is not.
  std::string taken_by(const wire::Header& hello) const;
  // Answers a joiner's hello with `refused` over the connection it came by (log: say so
  // here too, unless the drop log did).
  void refuse_hello(const std::string& identity, const wire::Header& hello, const std::string& why, bool log = true);
  void on_link_event(Link& link, const MonitorEvent& ev);
  void on_router_event(const MonitorEvent& ev);
  // Whether the peer behind the link said bye lately (its disconnect is a departure).
  bool said_bye_recently(const Link& link) const;
  void report(Link& link, PeerFailure failure, const std::string& detail,
              logging::Level level = logging::Level::warn);
  int next_timeout_ms();
  // Marks a socket to be asked for its events at the next turn of the loop (see loop()).
  void unsettle(zmq::socket_t& socket) { unsettled.insert(socket.handle()); }
  void check_deadlines();
  void apply_common_options(zmq::socket_t& socket) const;

  ZmqOptions options;
  Inbox& inbox;
  const ZmqTransport& owner;  // its tap: what a decorator sees of the arrivals
  zmq::context_t context;
  RefusalLog refusals;
  bool curve = false;
  transport::CurveKeyPair keys;
  std::unique_ptr<ZapHandler> zap;
  zmq::socket_t router, router_monitor, wake_rx, wake_tx;
  std::string bound_endpoint;
  wire::DropCounters counters;
  wire::DropLogger drop_log;
  // Peers that said bye, and when (I/O thread only): their disconnect is a departure.
  std::map<std::string, Clock::time_point> said_bye;
  static constexpr auto kByeMemory = std::chrono::seconds(30);

  std::mutex command_mutex;
  std::deque<std::unique_ptr<Command>> commands;
  bool stopped = false;
  mutable std::mutex address_mutex;
  std::map<std::string, std::string> addresses;  // peer id -> address given to connect()

  // Owned by the I/O thread once it runs.
  std::map<std::string, std::unique_ptr<Link>> links;
  // Sockets that may hold messages their descriptor will not signal again (see loop()).
  // A closed socket's handle may linger here: it is only looked up, never used.
  std::unordered_set<void*> unsettled;
  int monitor_sequence = 0;
  std::map<int, std::string> accepted_from;  // fd -> remote address (router monitor)
  std::string failed_handshake;              // why the connection the next router disconnect closes failed

  std::thread io;
};

}  // namespace hearsay::transport
