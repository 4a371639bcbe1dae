#include "gossip/network/transport/zmq_transport.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "base/log.hpp"
#include "base/thread_name.hpp"
#include "gossip/network/transport/zmq_impl.hpp"

namespace hearsay::transport {

namespace {

void release_keep_alive(void*, void* hint) { delete static_cast<std::shared_ptr<const void>*>(hint); }

// The payload as a zero-copy ZeroMQ message: it keeps the payload's owner alive until
// ZeroMQ has written the bytes (or dropped them).
zmq::message_t borrow(const Payload& payload) {
  if (payload.bytes().empty()) return zmq::message_t();
  auto* hint = new std::shared_ptr<const void>(payload.owner());
  return zmq::message_t(const_cast<std::uint8_t*>(payload.bytes().data()), payload.bytes().size(),
                        &release_keep_alive, hint);
}

}  // namespace

void set_key(zmq::socket_t& socket, int option, const std::string& z85) {
  // The 41-byte, NUL-terminated Z85 form is the one every libzmq 4.x accepts.
  if (zmq_setsockopt(socket.handle(), option, z85.c_str(), z85.size() + 1) != 0)
    throw TransportError(std::string("cannot set a CURVE key: ") + zmq_strerror(zmq_errno()));
}

std::string printable(std::string_view raw) {
  std::string out;
  for (unsigned char c : raw.substr(0, 64)) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return raw.size() > 64 ? out + "..." : out;
}

ZmqTransport::Impl::Impl(ZmqOptions opts, Inbox& inbox_ref, const ZmqTransport& owner_ref)
    : options(std::move(opts)),
      inbox(inbox_ref),
      owner(owner_ref),
      context(std::max(1, options.io_threads)),
      refusals(options.id) {
  const std::string& id = options.id;
  if (id.empty() || id.size() > wire::kMaxIdBytes || id.front() == '\0')
    throw TransportError("peer id '" + printable(id) +
                         "' must be 1 to 255 bytes, not starting with a zero byte");
  const Security& sec = options.security;
  if (sec.insecure) {
    if (sec.keypair || !sec.keys_dir.empty())
      throw TransportError("peer '" + id +
                           "': CURVE keys were given together with insecure mode; choose one");
  } else {
    if (!zmq_has("curve"))
      throw TransportError("peer '" + id +
                           "': this libzmq was built without CURVE; use insecure mode or "
                           "install a libzmq with libsodium");
    if (!sec.keypair && sec.keys_dir.empty())
      throw TransportError("peer '" + id +
                           "': no CURVE keys: give a keys directory (create one with 'hearsay "
                           "keygen') or choose insecure mode for plain TCP");
    if (!sec.authorized && sec.authorized_dir.empty())
      throw TransportError("peer '" + id +
                           "': CURVE needs an authorized directory with the peers' *.pub files");
    keys = sec.keypair ? *sec.keypair : transport::load_keypair(sec.keys_dir);
    transport::AuthorizedKeys authorized =
        sec.authorized ? *sec.authorized : transport::load_authorized(sec.authorized_dir);
    curve = true;
    // Bound before the router: libzmq accepts every CURVE client while no handler exists.
    zap = std::make_unique<ZapHandler>(context, std::move(authorized), refusals);
  }

  router = zmq::socket_t(context, zmq::socket_type::router);
  apply_common_options(router);
  router.set(zmq::sockopt::router_mandatory, 1);
  // A restarted peer reconnecting under its id takes over from a connection that has
  // not been noticed dead yet (otherwise its messages would be ignored).
  router.set(zmq::sockopt::router_handover, 1);
  if (curve) {
    router.set(zmq::sockopt::curve_server, 1);
    set_key(router, ZMQ_CURVE_SECRETKEY, keys.secret_z85);
    router.set(zmq::sockopt::zap_domain, "hearsay");
    router_monitor = zmq::socket_t(context, zmq::socket_type::pair);
    router_monitor.set(zmq::sockopt::rcvhwm, 0);  // libzmq blocks its I/O thread on a full monitor pipe
    if (zmq_socket_monitor(router.handle(), kRouterMonitorEndpoint, kRouterEvents) != 0)
      throw TransportError("peer '" + id +
                           "': cannot monitor the router socket: " + zmq_strerror(zmq_errno()));
    router_monitor.connect(kRouterMonitorEndpoint);
  }
  try {
    router.bind(options.bind);
  } catch (const zmq::error_t& e) {
    throw TransportError("peer '" + id + "' cannot bind " + options.bind + ": " + e.what() +
                         " (use another port, or port * to let the system pick one)");
  }
  bound_endpoint = router.get(zmq::sockopt::last_endpoint);
  // libzmq creates "ipc://*" sockets relative to the working directory when TMPDIR is
  // unset; others may run elsewhere, so the address names the absolute path.
  if (bound_endpoint.starts_with("ipc://") && bound_endpoint.size() > 6 && bound_endpoint[6] != '/' &&
      bound_endpoint[6] != '@')
    bound_endpoint = "ipc://" + std::filesystem::absolute(bound_endpoint.substr(6)).string();
  if (!curve)
    logging::warn("peer '" + id + "': insecure mode, plain " + bound_endpoint +
                  " without CURVE: anyone who can reach it can read and inject messages");

  wake_rx = zmq::socket_t(context, zmq::socket_type::pair);
  wake_rx.bind(kWakeEndpoint);
  wake_tx = zmq::socket_t(context, zmq::socket_type::pair);
  wake_tx.set(zmq::sockopt::linger, 0);
  wake_tx.connect(kWakeEndpoint);
}

void ZmqTransport::Impl::apply_common_options(zmq::socket_t& socket) const {
  socket.set(zmq::sockopt::linger, static_cast<int>(options.linger.count()));
  socket.set(zmq::sockopt::sndhwm, std::max(1, options.send_queue));
  socket.set(zmq::sockopt::rcvhwm, std::max(1, options.send_queue));
  socket.set(zmq::sockopt::maxmsgsize,
             static_cast<std::int64_t>(wire::kMaxHeaderBytes + options.max_payload_bytes));
  socket.set(zmq::sockopt::tcp_keepalive, 1);
  socket.set(zmq::sockopt::tcp_keepalive_idle, static_cast<int>(options.keepalive_idle.count()));
  socket.set(zmq::sockopt::tcp_keepalive_intvl, static_cast<int>(options.keepalive_interval.count()));
  socket.set(zmq::sockopt::tcp_keepalive_cnt, options.keepalive_probes);
  if (options.socket_buffer_bytes > 0) {
    socket.set(zmq::sockopt::sndbuf, options.socket_buffer_bytes);
    socket.set(zmq::sockopt::rcvbuf, options.socket_buffer_bytes);
  }
}

void ZmqTransport::Impl::start() {
  inbox.set_on_room([this] {
    std::lock_guard lock(command_mutex);
    wake_locked();
  });
  io = std::thread([this] {
    name_this_thread("hs-transport");
    run();
  });
}

ZmqTransport::Impl::~Impl() {
  inbox.set_on_room(nullptr);
  if (io.joinable()) {
    auto stop = std::make_unique<Command>();
    stop->kind = Command::Kind::stop;
    try {
      submit(std::move(stop));
    } catch (const TransportError&) {
      // The I/O thread already stopped on its own.
    }
    io.join();
  }
  zap.reset();
  drop_log.flush(Clock::now(), true);
  // libzmq leaves the socket file of a bound ipc:// path behind; it is ours to remove.
  if (bound_endpoint.starts_with("ipc:///")) {
    std::error_code ignored;
    std::filesystem::remove(bound_endpoint.substr(6), ignored);
  }
}

void ZmqTransport::Impl::wake_locked() {
  // A full wake pipe means a wake-up is already pending: nothing to add.
  (void)wake_tx.send(zmq::message_t(), zmq::send_flags::dontwait);
}

std::future<void> ZmqTransport::Impl::submit(std::unique_ptr<Command> command) {
  auto done = command->done.get_future();
  std::lock_guard lock(command_mutex);
  if (stopped) throw TransportError("peer '" + options.id + "': the transport has stopped");
  const bool was_empty = commands.empty();
  commands.push_back(std::move(command));
  if (was_empty) wake_locked();
  return done;
}

ZmqTransport::ZmqTransport(ZmqOptions options)
    : Transport(options.inbox, options.expect),
      impl_(std::make_unique<Impl>(std::move(options), inbox(), *this)) {
  impl_->start();
}

ZmqTransport::~ZmqTransport() = default;

const std::string& ZmqTransport::id() const { return impl_->options.id; }

std::string ZmqTransport::address() const {
  return format_address(impl_->bound_endpoint, impl_->curve ? impl_->keys.public_z85 : std::string());
}

const std::string& ZmqTransport::public_key() const { return impl_->keys.public_z85; }

void ZmqTransport::connect(const std::string& peer_id, const std::string& address) {
  connect_as(peer_id, address, /*seed=*/false);
}

void ZmqTransport::connect_seed(const std::string& key, const std::string& address) {
  connect_as(key, address, /*seed=*/true);
}

void ZmqTransport::connect_as(const std::string& peer_id, const std::string& address, bool seed) {
  // Pending errors stay queued for send/receive: connect() is called from membership's
  // thread as well as the algorithm's, and must not take an error meant for the other.
  if (peer_id.empty() || peer_id.size() > wire::kMaxIdBytes || peer_id.front() == '\0')
    throw std::invalid_argument("connect: peer id '" + printable(peer_id) + "' is not a valid routing id");
  auto command = std::make_unique<Command>();
  command->kind = Command::Kind::connect;
  command->peer = peer_id;
  command->address = address;
  command->parsed = parse_address(address);
  command->seed = seed;
  if (impl_->curve && command->parsed.server_key.empty())
    throw TransportError("connect to '" + peer_id + "': address '" + address +
                         "' has no CURVE key; append #<its public key> (its address() has it)");
  if (!impl_->curve && !command->parsed.server_key.empty())
    throw TransportError("connect to '" + peer_id + "': address '" + address +
                         "' carries a CURVE key but this peer runs without CURVE (insecure mode)");
  impl_->submit(std::move(command)).get();
}

void ZmqTransport::transmit(const std::string& peer_id, wire::Header header, Payload payload) {
  if (payload.bytes().size() > impl_->options.max_payload_bytes)
    throw std::invalid_argument("send to '" + peer_id + "': a payload of " +
                                std::to_string(payload.bytes().size()) +
                                " bytes exceeds max_payload_bytes (" +
                                std::to_string(impl_->options.max_payload_bytes) + "), which peers refuse");
  const auto bytes = wire::encode_header(header);
  auto command = std::make_unique<Command>();
  command->kind = Command::Kind::send;
  command->peer = peer_id;
  command->header = zmq::message_t(bytes.data(), bytes.size());
  command->has_payload = payload.has_frame();
  if (command->has_payload) command->payload = borrow(payload);
  impl_->submit(std::move(command)).get();
}

std::string ZmqTransport::address_of(const std::string& peer_id) const {
  std::lock_guard lock(impl_->address_mutex);
  auto it = impl_->addresses.find(peer_id);
  return it == impl_->addresses.end() ? std::string("(no address)") : it->second;
}

Counters ZmqTransport::counters() const { return impl_->counters.snapshot(); }

}  // namespace hearsay::transport
