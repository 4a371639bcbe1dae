#include "gossip/network/transport/zap_handler.hpp"

#include <bit>
#include <zmq_addon.hpp>

#include "base/crash_report.hpp"
#include "base/log.hpp"
#include "base/thread_name.hpp"
#include "gossip/network/transport/transport.hpp"
#include "gossip/network/transport/zmq_impl.hpp"

namespace hearsay::transport {

namespace {
constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";
constexpr const char* kStopEndpoint = "inproc://hearsay-zap-stop";

std::string frame_text(const zmq::message_t& m) {
  return std::string(static_cast<const char*>(m.data()), m.size());
}
}  // namespace

void RefusalLog::refuse(const std::string& key, const std::string& what) {
  std::lock_guard lock(mutex_);
  ++refusals_;
  if (auto it = counts_.find(key); it != counts_.end()) {
    const std::uint64_t n = ++it->second;
    if (std::has_single_bit(n))
      logging::warn("peer '" + transport_id_ + "': " + what + " (" + std::to_string(n) + " times so far)");
    return;
  }
  if (counts_.size() < kRemembered) {
    counts_.emplace(key, 1);
    logging::warn("peer '" + transport_id_ + "': " + what);
  } else if (unlogged_++ == 0) {
    logging::warn("peer '" + transport_id_ + "': refused connections from more than " +
                  std::to_string(kRemembered) + " different clients; further ones are not logged");
  }
}

std::size_t RefusalLog::refusals() const {
  std::lock_guard lock(mutex_);
  return refusals_;
}

ZapHandler::ZapHandler(zmq::context_t& context, transport::AuthorizedKeys authorized, RefusalLog& refusals)
    : authorized_(std::move(authorized)),
      refusals_(refusals),
      socket_(context, zmq::socket_type::rep),
      stop_tx_(context, zmq::socket_type::pair),
      stop_rx_(context, zmq::socket_type::pair) {
  socket_.set(zmq::sockopt::linger, 0);
  try {
    socket_.bind(kZapEndpoint);
  } catch (const zmq::error_t& e) {
    throw TransportError(std::string("cannot start the CURVE authentication (ZAP) handler: ") + e.what());
  }
  stop_rx_.bind(kStopEndpoint);
  stop_tx_.connect(kStopEndpoint);
  thread_ = std::thread([this] {
    name_this_thread("hs-zap");
    run();
  });
}

ZapHandler::~ZapHandler() {
  try {
    stop_tx_.send(zmq::message_t(), zmq::send_flags::dontwait);
  } catch (const zmq::error_t&) {
    // Context already shut down: the thread sees ETERM and returns by itself.
  }
  if (thread_.joinable()) thread_.join();
}

void ZapHandler::run() {
  // Signals are for the application's threads (a Ctrl-C handler): none interrupts a poll.
  block_async_signals_in_this_thread();
  zmq::pollitem_t items[] = {{socket_.handle(), 0, ZMQ_POLLIN, 0}, {stop_rx_.handle(), 0, ZMQ_POLLIN, 0}};
  for (;;) {
    try {
      poll_sockets(items, 2, std::chrono::milliseconds(-1));
      if (items[1].revents & ZMQ_POLLIN) return;
      if (!(items[0].revents & ZMQ_POLLIN)) continue;
      std::vector<zmq::message_t> request;
      if (!zmq::recv_multipart(socket_, std::back_inserter(request))) continue;
      answer(request);
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) return;
      logging::error(std::string("CURVE authentication handler: ") + e.what());
    } catch (const std::exception& e) {
      logging::error(std::string("CURVE authentication handler: ") + e.what());
    }
  }
}

void ZapHandler::answer(std::vector<zmq::message_t>& request) {
  // RFC 27 request: version, request id, domain, address, routing id, mechanism,
  // credentials (CURVE: the client's 32-byte long-term public key).
  const std::string request_id = request.size() > 1 ? frame_text(request[1]) : std::string();
  std::string status = "400", text = "not authorized", user;
  if (request.size() >= 7 && frame_text(request[0]) == "1.0" && frame_text(request[5]) == "CURVE" &&
      request[6].size() == transport::kCurveKeyBytes) {
    const std::span<const std::uint8_t, 32> raw(static_cast<const std::uint8_t*>(request[6].data()), 32);
    const std::string key = transport::z85_from_binary(raw);
    const std::string address = frame_text(request[3]);
    if (authorized_.contains(key)) {
      status = "200";
      text = "OK";
      user = authorized_.name_of(key);
    } else {
      refusals_.refuse(key + "@" + address, "refused CURVE client with key " + key + " from " + address +
                                                ": the key is not in the authorized directory (add its "
                                                "peer.pub there to let it in)");
    }
  } else {
    const std::string mechanism = request.size() > 5 ? frame_text(request[5]) : std::string("?");
    const std::string address = request.size() > 3 ? frame_text(request[3]) : std::string("?");
    refusals_.refuse(mechanism + "@" + address, "refused a " + mechanism + " client from " + address +
                                                    ": only CURVE clients with authorized keys may connect");
  }
  std::vector<zmq::message_t> reply;
  reply.emplace_back(std::string_view("1.0"));
  reply.emplace_back(request_id.data(), request_id.size());
  reply.emplace_back(status.data(), status.size());
  reply.emplace_back(text.data(), text.size());
  reply.emplace_back(user.data(), user.size());
  reply.emplace_back();
  zmq::send_multipart(socket_, reply);
}

}  // namespace hearsay::transport
