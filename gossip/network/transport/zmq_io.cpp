// The I/O thread of the ZeroMQ transport: it alone touches the sockets. It polls the
// wake-up pipe (commands from callers), the ROUTER, each peer's DEALER and the socket
// monitors; admits incoming messages; answers PINGs; turns connection events into
// PeerErrors for the caller. A decorator's tap (transport.hpp) sees each arrival first.
#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <random>

#include "base/crash_report.hpp"
#include "base/log.hpp"
#include "gossip/network/transport/admission.hpp"
#include "gossip/network/transport/zmq_impl.hpp"

namespace hearsay::transport {

namespace {

// Messages read from one socket before the loop looks at the others again.
constexpr int kReadBatch = 256;
// The loop wakes at least this often to flush rate-limited drop log lines.
constexpr std::chrono::milliseconds kHousekeeping{1000};

std::optional<MonitorEvent> read_event(zmq::socket_t& monitor) {
  zmq::message_t first;
  if (!monitor.recv(first, zmq::recv_flags::dontwait)) return std::nullopt;
  MonitorEvent ev;
  if (first.size() >= 6) {
    std::memcpy(&ev.event, first.data(), 2);
    std::memcpy(&ev.value, static_cast<const char*>(first.data()) + 2, 4);
  }
  while (first.more()) {  // the endpoint frame, not needed: each socket has one endpoint
    if (!monitor.recv(first)) break;
  }
  return ev;
}

std::string remote_address(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "an unknown address";
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
    return std::string(text) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (addr.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
    return "[" + std::string(text) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  return "a local socket";
}

}  // namespace

void ZmqTransport::Impl::run() {
  // Signals are for the application's threads (a Ctrl-C handler): none interrupts a poll.
  block_async_signals_in_this_thread();
  try {
    loop();
  } catch (const std::exception& e) {
    inbox.push_error(std::make_exception_ptr(
        TransportError("peer '" + options.id + "': the I/O thread stopped: " + std::string(e.what()))));
  }
  std::deque<std::unique_ptr<Command>> orphans;
  {
    std::lock_guard lock(command_mutex);
    stopped = true;
    orphans.swap(commands);
  }
  for (auto& c : orphans)
    c->done.set_exception(
        std::make_exception_ptr(TransportError("peer '" + options.id + "': the transport has stopped")));
  links.clear();
  // As for links (~Link): stop the monitor before its reader and the router close.
  if (router) (void)zmq_socket_monitor(router.handle(), nullptr, 0);
  router_monitor.close();
  router.close();
  wake_rx.close();
}

// The loop polls the sockets' own descriptors (ZMQ_FD) with one poll(2) and asks ZMQ_EVENTS
// only of the sockets that may have something to read. zmq::poll asks every socket twice
// per call (two system calls each): with a dozen peers that was a hundred system calls for
// every message, the I/O thread's main cost on a busy box. ZMQ_FD is edge-triggered (it
// signals that commands arrived, not that messages wait), so a socket stays `unsettled`,
// and is asked again without waiting, until a read of it ran dry; one that was written to
// is asked too, since a send may take the signal of an arrival with it; so is a new socket,
// whose pipes signal only once they have been found empty.
void ZmqTransport::Impl::loop() {
  enum class Source { wake, router_monitor, router, monitor, dealer };
  struct Watched {
    zmq::socket_t* socket;
    Source what;
    Link* link;
  };
  std::vector<Watched> watched;
  std::vector<pollfd> fds;
  bool first_turn = true;
  for (;;) {
    watched.clear();
    fds.clear();
    auto add = [&](zmq::socket_t& s, Source what, Link* link) {
      watched.push_back({&s, what, link});
      fds.push_back({s.get(zmq::sockopt::fd), POLLIN, 0});
    };
    add(wake_rx, Source::wake, nullptr);
    if (router_monitor) add(router_monitor, Source::router_monitor, nullptr);
    // While the inbox is full nothing is read: ZeroMQ queues, then pushes back on senders.
    const bool room = inbox.has_room();
    if (room) add(router, Source::router, nullptr);
    for (auto& [id, link] : links) {
      add(link->monitor, Source::monitor, link.get());
      if (room) add(link->dealer, Source::dealer, link.get());
    }
    // ZeroMQ signals a pipe's arrivals only once its reader has found it empty: the first
    // turn asks every socket made before the loop.
    if (first_turn)
      for (const Watched& w : watched) unsettle(*w.socket);
    first_turn = false;
    const bool ready_now = std::any_of(watched.begin(), watched.end(), [&](const Watched& w) {
      return unsettled.contains(w.socket->handle());
    });
    // EINTR (signals are blocked here, but a debugger may interrupt) counts as a timeout.
    (void)::poll(fds.data(), fds.size(), ready_now ? 0 : next_timeout_ms());

    bool wake = false;
    for (std::size_t i = 0; i < watched.size(); ++i) {
      const auto [socket, what, link] = watched[i];
      const bool signalled = (fds[i].revents & POLLIN) != 0;
      const bool was_unsettled = unsettled.erase(socket->handle()) > 0;
      if (!signalled && !was_unsettled) continue;
      if (!(socket->get(zmq::sockopt::events) & ZMQ_POLLIN)) continue;
      switch (what) {
        case Source::wake:
          wake = true;
          break;
        case Source::router_monitor:
          while (auto ev = read_event(router_monitor)) on_router_event(*ev);
          break;
        case Source::router:
          read_socket(router, nullptr);
          break;
        case Source::monitor:
          while (auto ev = read_event(link->monitor)) on_link_event(*link, *ev);
          break;
        case Source::dealer:
          read_socket(link->dealer, link);
          break;
      }
    }
    check_deadlines();
    drop_log.flush();
    // Commands last: a connect may replace a link the entries above point to.
    if (wake && !run_commands()) return;
  }
}

int ZmqTransport::Impl::next_timeout_ms() {
  auto next = Clock::now() + kHousekeeping;
  for (const auto& [id, link] : links)
    if (link->state == Link::State::connecting && !link->reported)
      next = std::min(next, link->connect_deadline);
  const auto wait = std::chrono::ceil<std::chrono::milliseconds>(next - Clock::now());
  return static_cast<int>(std::max<std::int64_t>(0, wait.count()));
}

void ZmqTransport::Impl::check_deadlines() {
  const auto now = Clock::now();
  for (auto& [id, link] : links) {
    if (link->state != Link::State::connecting || link->reported || now < link->connect_deadline) continue;
    report(*link, PeerFailure::unreachable,
           "no connection within " + std::to_string(options.connect_timeout.count()) +
               " ms (refused, no route, or no handshake): is the peer running and the address right?" +
               (curve ? " With CURVE, the address must end in the peer's current public key." : ""));
  }
}

bool ZmqTransport::Impl::run_commands() {
  zmq::message_t drain;
  while (wake_rx.recv(drain, zmq::recv_flags::dontwait)) {
  }
  std::deque<std::unique_ptr<Command>> batch;
  {
    std::lock_guard lock(command_mutex);
    batch.swap(commands);
  }
  for (auto& command : batch) {
    try {
      switch (command->kind) {
        case Command::Kind::stop:
          command->done.set_value();
          for (auto& rest : batch)
            if (rest && rest != command)
              rest->done.set_exception(std::make_exception_ptr(TransportError("the transport is stopping")));
          return false;
        case Command::Kind::connect:
          connect_link(*command);
          break;
        case Command::Kind::send:
          send_message(*command);
          break;
      }
      command->done.set_value();
    } catch (...) {
      command->done.set_exception(std::current_exception());
    }
    command.reset();
  }
  return true;
}

Link::~Link() {
  if (dealer) (void)zmq_socket_monitor(dealer.handle(), nullptr, 0);
}

namespace {

// The identity of a joiner's hello connection: the prefix and 16 random hex digits, its own
// for every connection (admission.hpp, Route::joiner).
std::string joiner_identity() {
  static std::atomic<std::uint64_t> sequence{0};
  std::random_device device;
  const std::uint64_t bits =
      (std::uint64_t{device()} << 32 ^ device()) ^ (sequence.fetch_add(1) * 0x9e3779b97f4a7c15ULL);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(bits));
  return std::string(1, kJoinerIdentityPrefix) + hex;
}

}  // namespace

void ZmqTransport::Impl::connect_link(Command& command) {
  // Connecting again to where a healthy link already goes keeps that link: its dealer
  // reconnects by itself. Replacing it would race the closing connection against the
  // new one at the other side's ROUTER, which gives our routing id to whichever
  // finishes its handshake last and drops everything sent over the other.
  if (const auto existing = links.find(command.peer);
      existing != links.end() && existing->second->address == command.address && !existing->second->reported)
    return;
  auto link = std::make_unique<Link>();
  link->peer_id = command.peer;
  link->address = command.address;
  link->dealer = zmq::socket_t(context, zmq::socket_type::dealer);
  apply_common_options(link->dealer);
  link->seed = command.seed;
  link->dealer.set(zmq::sockopt::routing_id, command.seed ? joiner_identity() : options.id);
  if (curve) {
    set_key(link->dealer, ZMQ_CURVE_SERVERKEY, command.parsed.server_key);
    set_key(link->dealer, ZMQ_CURVE_PUBLICKEY, keys.public_z85);
    set_key(link->dealer, ZMQ_CURVE_SECRETKEY, keys.secret_z85);
  }
  // The monitor is attached before connecting so no event is missed.
  const std::string monitor_endpoint = "inproc://hearsay-monitor-" + std::to_string(++monitor_sequence);
  if (zmq_socket_monitor(link->dealer.handle(), monitor_endpoint.c_str(), kLinkEvents) != 0)
    throw TransportError("peer '" + options.id + "': cannot monitor the connection to '" + command.peer +
                         "': " + zmq_strerror(zmq_errno()));
  link->monitor = zmq::socket_t(context, zmq::socket_type::pair);
  link->monitor.set(zmq::sockopt::linger, 0);
  // No high-water mark: libzmq blocks its I/O thread when a monitor pipe is full.
  link->monitor.set(zmq::sockopt::rcvhwm, 0);
  link->monitor.connect(monitor_endpoint);
  try {
    link->dealer.connect(command.parsed.endpoint);
  } catch (const zmq::error_t& e) {
    throw TransportError("peer '" + options.id + "': cannot connect to '" + command.peer + "' at " +
                         command.address + ": " + e.what());
  }
  link->connect_deadline = Clock::now() + options.connect_timeout;
  unsettle(link->dealer);
  unsettle(link->monitor);
  auto& slot = links[command.peer];
  if (slot) slot->dealer.set(zmq::sockopt::linger, 0);  // messages for the old address are moot
  slot = std::move(link);
  std::lock_guard lock(address_mutex);
  addresses[command.peer] = command.address;
}

void ZmqTransport::Impl::send_message(Command& command) {
  std::string address;
  switch (send_frames(command.peer, command.header, command.payload, command.has_payload, address)) {
    case Handover::sent:
      return;
    case Handover::unknown_peer:
      throw PeerError(PeerFailure::unknown_peer, command.peer, address,
                      "not connected and no connection from it: call connect() with its address first");
    case Handover::full:
      throw PeerError(PeerFailure::backpressure, command.peer, address,
                      std::to_string(options.send_queue) +
                          " messages already queued for it: it is not reading them or the link is too slow");
  }
}

ZmqTransport::Impl::Handover ZmqTransport::Impl::send_frames(const std::string& peer, zmq::message_t& header,
                                                             zmq::message_t& payload, bool has_payload,
                                                             std::string& address) {
  auto more = [&](bool last) {
    return zmq::send_flags::dontwait | (last ? zmq::send_flags::none : zmq::send_flags::sndmore);
  };
  std::optional<std::size_t> sent;
  address = "(no address)";
  auto it = links.find(peer);
  if (it != links.end()) {
    address = it->second->address;
    unsettle(it->second->dealer);
    sent = it->second->dealer.send(header, more(!has_payload));
  } else {
    // Not connected by us: maybe it connected to us (a reply). ROUTER_MANDATORY makes
    // an unknown routing id an EHOSTUNREACH error rather than a silent drop.
    unsettle(router);
    try {
      sent = router.send(zmq::buffer(peer), more(false));
    } catch (const zmq::error_t& e) {
      if (e.num() != EHOSTUNREACH) throw;
      return Handover::unknown_peer;
    }
    if (sent) sent = router.send(header, more(!has_payload));
  }
  if (!sent) return Handover::full;
  if (has_payload) {
    zmq::socket_t& socket = it != links.end() ? it->second->dealer : router;
    socket.send(payload, zmq::send_flags::dontwait);
  }
  return Handover::sent;
}

void ZmqTransport::Impl::read_socket(zmq::socket_t& socket, const Link* link) {
  const std::string* link_peer = link ? &link->peer_id : nullptr;
  for (int n = 0; n < kReadBatch && inbox.has_room(); ++n) {
    zmq::message_t first;
    if (!socket.recv(first, zmq::recv_flags::dontwait)) return;
    std::string identity;
    std::size_t frames = 0;
    zmq::message_t header, payload;
    bool more = first.more();
    if (link_peer) {
      identity = *link_peer;
      header = std::move(first);
      frames = 1;
    } else {
      identity = first.to_string();
    }
    // The rest of the message; frames beyond two are read and dropped one by one.
    while (more) {
      zmq::message_t part;
      (void)socket.recv(part);
      more = part.more();
      if (frames == 0)
        header = std::move(part);
      else if (frames == 1)
        payload = std::move(part);
      ++frames;
    }
    accept(identity, frames, header, payload, socket, link);
  }
  // Stopped before it ran dry (a full inbox, or the batch): more may wait without a new
  // signal. While the inbox is full the socket is not watched; it is asked once there is room.
  unsettle(socket);
}

void ZmqTransport::Impl::accept(const std::string& identity, std::size_t frames, zmq::message_t& header,
                                zmq::message_t& payload, zmq::socket_t& socket, const Link* link) {
  const bool via_router = link == nullptr;
  const bool joiner = via_router && !identity.empty() && identity.front() == kJoinerIdentityPrefix;
  const Route route = joiner ? Route::joiner : (link && link->seed ? Route::seed : Route::direct);
  // A joiner's connection names nobody: its hello is checked by the sender it names.
  if (!joiner && owner.tap_refuses(identity)) return;  // e.g. a partition: as if it never arrived
  const std::span<const std::uint8_t> header_bytes(static_cast<const std::uint8_t*>(header.data()),
                                                   header.size());
  const std::span<const std::uint8_t> payload_bytes(static_cast<const std::uint8_t*>(payload.data()),
                                                    payload.size());
  Admission admission =
      admit(frames, header_bytes, payload_bytes, identity, route, options.expect, options.max_payload_bytes);
  if (!admission.header) {
    counters.record(admission.reason);
    const auto& hello = admission.refused_hello;
    drop_log.drop(printable(hello ? hello->sender : identity), admission.reason, admission.detail);
    if (via_router && hello) refuse_hello(identity, *hello, admission.detail, /*log=*/false);
    return;
  }
  if (joiner) {
    if (owner.tap_refuses(admission.header->sender)) return;
    if (const std::string why = taken_by(*admission.header); !why.empty()) {
      refuse_hello(identity, *admission.header, why);
      return;
    }
  }
  counters.record_accepted();
  wire::Header& h = *admission.header;
  if (h.type == wire::MessageType::bye) said_bye[h.sender] = Clock::now();
  if (owner.tap_takes(h)) return;  // e.g. a ping, answered across an emulated link
  if (h.type == wire::MessageType::ping) {
    // Answered here, so a live endpoint answers even while its caller is busy.
    wire::Header pong;
    pong.type = wire::MessageType::pong;
    pong.nonce = h.nonce;
    pong.step = h.step;
    pong.sender = options.id;
    pong.run_id = options.expect.run_id;
    pong.fingerprint = options.expect.fingerprint;
    const auto bytes = wire::encode_header(pong);
    unsettle(socket);
    try {
      if (via_router &&
          !socket.send(zmq::buffer(identity), zmq::send_flags::dontwait | zmq::send_flags::sndmore))
        return;  // its queue is full: it will ping again
      (void)socket.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
    } catch (const zmq::error_t&) {
      // The pinger is gone already (EHOSTUNREACH): nobody to answer.
    }
    return;
  }
  // The message owns the ZeroMQ frame; the span is taken after the move because small
  // frames live inside the zmq_msg_t itself.
  auto owner = std::make_shared<zmq::message_t>(std::move(payload));
  const std::span<const std::uint8_t> view(static_cast<const std::uint8_t*>(owner->data()), owner->size());
  inbox.push(Message(std::move(h), frames == 2 ? view : std::span<const std::uint8_t>{},
                     frames == 2 ? std::shared_ptr<const void>(owner) : nullptr));
}

std::string ZmqTransport::Impl::taken_by(const wire::Header& hello) const {
  const std::string& id = hello.sender;
  std::string holder;
  if (id == options.id) {
    holder = bound_endpoint;  // this very peer
  } else if (const auto it = links.find(id); it != links.end() && it->second->state == Link::State::connected &&
                                             it->second->address != hello.address) {
    // Connected to another process under that id, at another address. A peer restarted
    // elsewhere under its old id is not refused: its old connection dropped when it died
    // (a machine that vanished without a word keeps it until TCP keepalive gives up).
    holder = parse_address(it->second->address).endpoint;
  } else {
    return "";
  }
  return "id '" + id + "' is taken by " + holder + ": give every peer its own --id (or --rank)";
}

void ZmqTransport::Impl::refuse_hello(const std::string& identity, const wire::Header& hello,
                                      const std::string& why, bool log) {
  if (log)
    logging::warn("peer '" + options.id + "': refused the hello of '" + printable(hello.sender) + "' at " +
                  printable(hello.address) + ": " + why);
  wire::Header refused;
  refused.type = wire::MessageType::refused;
  refused.sender = options.id;
  refused.run_id = options.expect.run_id;
  refused.fingerprint = options.expect.fingerprint;
  refused.nonce = hello.nonce;
  refused.why = why.substr(0, 1000);
  const auto bytes = wire::encode_header(refused);
  unsettle(router);
  try {
    if (router.send(zmq::buffer(identity), zmq::send_flags::dontwait | zmq::send_flags::sndmore))
      (void)router.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
  } catch (const zmq::error_t&) {
    // The joiner is gone already (EHOSTUNREACH): nobody to tell.
  }
}

bool ZmqTransport::Impl::said_bye_recently(const Link& link) const {
  const auto now = Clock::now();
  auto recent = [&](const std::string& id) {
    const auto bye = said_bye.find(id);
    return bye != said_bye.end() && now - bye->second < kByeMemory;
  };
  if (recent(link.peer_id)) return true;
  // The same process under another name: a joiner's link to its seed address is named
  // after the address, and the seed says bye under its peer id.
  for (const auto& [id, other] : links)
    if (other.get() != &link && other->address == link.address && recent(id)) return true;
  return false;
}

void ZmqTransport::Impl::report(Link& link, PeerFailure failure, const std::string& detail,
                                logging::Level level) {
  link.reported = true;
  logging::write(level,
                 "peer '" + options.id + "': peer '" + link.peer_id + "' at " + link.address + ": " + detail);
  inbox.push_error(std::make_exception_ptr(PeerError(failure, link.peer_id, link.address, detail)));
}

void ZmqTransport::Impl::on_link_event(Link& link, const MonitorEvent& ev) {
  switch (ev.event) {
    case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
      link.state = Link::State::connected;
      link.reported = false;
      said_bye.erase(link.peer_id);  // back (a restart under the same id): a later loss is news again
      break;
    case ZMQ_EVENT_DISCONNECTED: {
      if (link.state != Link::State::connected) break;  // a failed attempt, not a loss
      link.state = Link::State::connecting;
      link.connect_deadline = Clock::now() + options.connect_timeout;
      if (said_bye_recently(link)) {
        // It told us it was leaving: news, not a warning (and no "unreachable" later).
        report(link, PeerFailure::left, "it left the run (said bye); its connection closed",
               logging::Level::info);
        break;
      }
      report(
          link, PeerFailure::disconnected,
          "connection lost (the peer process stopped or the network failed); reconnecting in the background");
      break;
    }
    case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
      if (!link.reported)
        report(link, PeerFailure::refused,
               "refused our CURVE key (status " + std::to_string(ev.value) + "): add our peer.pub (key " +
                   keys.public_z85 + ") to its authorized directory");
      break;
    case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
      if (!link.reported) {
        char code[16];
        std::snprintf(code, sizeof(code), "0x%08x", ev.value);
        report(link, PeerFailure::refused,
               std::string("handshake failed (ZMTP protocol error ") + code +
                   "): both peers must use CURVE, or both insecure mode, and the address must carry the "
                   "peer's current public key");
      }
      break;
    default:
      break;
  }
}

void ZmqTransport::Impl::on_router_event(const MonitorEvent& ev) {
  const int fd = static_cast<int>(ev.value);
  switch (ev.event) {
    case ZMQ_EVENT_ACCEPTED:
      // Best effort: by the time the event is read the connection may be closed.
      if (accepted_from.size() < 4096) accepted_from[fd] = remote_address(fd);
      break;
    case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
    case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
      // A client without CURVE never reaches the ZAP handler. Whichever side notices
      // the mechanism mismatch first reports it (here: a protocol error; there: we see
      // the connection close mid-handshake). The connection's DISCONNECTED event, with
      // its fd and so its address, follows directly.
      failed_handshake = ev.event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
                                 ev.value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH
                             ? "it does not use CURVE (plain or NULL security)"
                             : "it does not use CURVE, uses another server key, or left mid-handshake";
      break;
    case ZMQ_EVENT_DISCONNECTED: {
      auto it = accepted_from.find(fd);
      const std::string from = it == accepted_from.end() ? std::string("an unknown address") : it->second;
      if (it != accepted_from.end()) accepted_from.erase(it);
      if (!failed_handshake.empty()) {
        // Keyed by host: a client that retries comes from a new ephemeral port each time.
        const std::string host = from.substr(
            0, from.rfind(':') == std::string::npos || from.back() == ']' ? from.size() : from.rfind(':'));
        refusals.refuse("handshake@" + host, "refused a client from " + host + " on " + bound_endpoint +
                                                 ": it failed the CURVE handshake (" + failed_handshake +
                                                 "); only CURVE clients with authorized keys may connect");
        failed_handshake.clear();
      }
      break;
    }
    default:
      break;
  }
}

}  // namespace hearsay::transport
