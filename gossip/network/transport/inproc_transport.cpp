#include "gossip/network/transport/inproc_transport.hpp"

#include <algorithm>
#include <stdexcept>

#include "base/thread_name.hpp"
#include "gossip/network/transport/admission.hpp"

namespace hearsay::transport {

namespace {
constexpr std::string_view kScheme = "inproc-fabric:";
}

// One registered transport. The lock serialises deliveries into it with its
// destruction; `owner` is null once the transport is gone.
struct InprocFabric::Endpoint {
  std::mutex mutex;
  InprocTransport* owner = nullptr;
  bool killed = false;
};

std::shared_ptr<InprocFabric> InprocFabric::create() {
  return std::shared_ptr<InprocFabric>(new InprocFabric());
}

std::shared_ptr<InprocFabric::Endpoint> InprocFabric::attach(const std::string& id, InprocTransport* owner) {
  std::lock_guard lock(mutex_);
  auto [it, inserted] = endpoints_.try_emplace(id, nullptr);
  if (!inserted && it->second->owner != nullptr)
    throw std::invalid_argument("in-process fabric: endpoint id '" + id + "' is already taken");
  it->second = std::make_shared<Endpoint>();
  it->second->owner = owner;
  return it->second;
}

void InprocFabric::detach(const std::string& id) {
  std::shared_ptr<Endpoint> endpoint;
  {
    std::lock_guard lock(mutex_);
    auto it = endpoints_.find(id);
    if (it == endpoints_.end()) return;
    endpoint = it->second;
    endpoints_.erase(it);
  }
  std::lock_guard lock(endpoint->mutex);
  endpoint->owner = nullptr;
}

std::shared_ptr<InprocFabric::Endpoint> InprocFabric::find(const std::string& id) const {
  std::lock_guard lock(mutex_);
  auto it = endpoints_.find(id);
  return it == endpoints_.end() ? nullptr : it->second;
}

void InprocFabric::kill(const std::string& id) {
  auto victim = find(id);
  if (!victim) throw std::invalid_argument("in-process fabric: no endpoint '" + id + "' to kill");
  {
    std::lock_guard lock(victim->mutex);
    if (victim->killed) return;
    victim->killed = true;
    if (victim->owner)
      victim->owner->inbox().push_error(
          std::make_exception_ptr(TransportError("endpoint '" + id + "' was killed on its fabric")));
  }
  std::vector<std::shared_ptr<Endpoint>> others;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [other_id, endpoint] : endpoints_)
      if (other_id != id) others.push_back(endpoint);
  }
  for (const auto& endpoint : others) {
    std::lock_guard lock(endpoint->mutex);
    if (endpoint->owner && !endpoint->killed) endpoint->owner->peer_killed(id);
  }
}

void InprocFabric::inject(const std::string& to, const std::string& identity,
                          const std::vector<std::vector<std::uint8_t>>& frames) {
  deliver(to, identity, frames, false);
}

void InprocFabric::set_loss(double probability, std::uint64_t seed) {
  if (!(probability >= 0.0 && probability <= 1.0))
    throw std::invalid_argument("in-process fabric: loss probability " + std::to_string(probability) +
                                " is not in [0, 1]");
  std::lock_guard lock(loss_mutex_);
  loss_probability_ = probability;
  loss_rng_ = Rng(seed);
}

std::uint64_t InprocFabric::dropped_by_loss() const {
  std::lock_guard lock(loss_mutex_);
  return dropped_by_loss_;
}

InprocFabric::~InprocFabric() {
  {
    std::lock_guard lock(held_mutex_);
    stopping_ = true;
  }
  held_changed_.notify_all();
  if (delivery_.joinable()) delivery_.join();
}

void InprocFabric::set_link_trouble(const std::string& id, std::chrono::nanoseconds delay, double loss,
                                    std::uint64_t seed) {
  if (delay < std::chrono::nanoseconds::zero())
    throw std::invalid_argument("in-process fabric: a link delay cannot be negative");
  if (!(loss >= 0.0 && loss <= 1.0))
    throw std::invalid_argument("in-process fabric: loss probability " + std::to_string(loss) +
                                " is not in [0, 1]");
  std::lock_guard lock(loss_mutex_);
  if (delay == std::chrono::nanoseconds::zero() && loss == 0.0)
    troubles_.erase(id);
  else
    troubles_[id] = Trouble{delay, loss, Rng(seed)};
}

InprocFabric::Fate InprocFabric::fate(const std::string& from, const std::string& to) {
  std::lock_guard lock(loss_mutex_);
  Fate f;
  for (const std::string* end : {&from, &to}) {
    auto it = troubles_.find(*end);
    if (it == troubles_.end()) continue;
    f.delay = std::max(f.delay, it->second.delay);
    // Each end's draw is made whether or not the other end lost it already, so that one
    // end's sequence of draws does not depend on the other's.
    const bool lost_here = it->second.loss > 0 && it->second.rng.uniform() < it->second.loss;
    f.lost = f.lost || lost_here;
  }
  if (f.lost) ++dropped_by_loss_;
  return f;
}

namespace {
bool released_later(const auto& a, const auto& b) {
  return a.release != b.release ? a.release > b.release : a.sequence > b.sequence;
}
}  // namespace

void InprocFabric::hold(std::chrono::steady_clock::time_point release, const std::string& to,
                        const std::string& from, std::vector<std::vector<std::uint8_t>> frames) {
  {
    std::lock_guard lock(held_mutex_);
    held_.push_back(Held{release, held_sequence_++, to, from, std::move(frames)});
    std::push_heap(held_.begin(), held_.end(), released_later<Held, Held>);
    if (!delivery_.joinable())
      delivery_ = std::thread([this] {
        name_this_thread("hs-inproc");
        deliver_held();
      });
  }
  held_changed_.notify_all();
}

void InprocFabric::deliver_held() {
  std::unique_lock lock(held_mutex_);
  while (!stopping_) {
    if (held_.empty()) {
      held_changed_.wait(lock);
      continue;
    }
    const auto release = held_.front().release;
    if (std::chrono::steady_clock::now() < release) {
      held_changed_.wait_until(lock, release);
      continue;
    }
    std::pop_heap(held_.begin(), held_.end(), released_later<Held, Held>);
    Held due = std::move(held_.back());
    held_.pop_back();
    lock.unlock();
    deliver(due.to, due.from, due.frames, false);  // its fate was drawn when it was sent
    lock.lock();
  }
}

bool InprocFabric::lose() {
  std::lock_guard lock(loss_mutex_);
  if (loss_probability_ <= 0.0 || loss_rng_.uniform() >= loss_probability_) return false;
  ++dropped_by_loss_;
  return true;
}

InprocFabric::Delivery InprocFabric::deliver(const std::string& to, const std::string& identity,
                                             const std::vector<std::vector<std::uint8_t>>& frames,
                                             bool lossy) {
  auto endpoint = find(to);
  if (!endpoint) return Delivery::no_endpoint;
  std::optional<wire::Header> pong;
  {
    std::lock_guard lock(endpoint->mutex);
    if (endpoint->killed) return Delivery::killed;
    if (!endpoint->owner) return Delivery::no_endpoint;
    if (!endpoint->owner->inbox().has_room()) return Delivery::full;
    // Lost on the way: the sender cannot tell, as with a real lossy link.
    if (lossy && lose()) return Delivery::delivered;
    pong = endpoint->owner->accept(identity, frames);
  }
  // Answered outside the receiver's lock: the pinger may be pinging us back right now.
  if (pong) deliver(identity, to, {wire::encode_header(*pong)}, false);
  return Delivery::delivered;
}

InprocTransport::InprocTransport(std::shared_ptr<InprocFabric> fabric, InprocOptions options)
    : Transport(options.inbox, options.expect), fabric_(std::move(fabric)), options_(std::move(options)) {
  if (!fabric_) throw std::invalid_argument("InprocTransport: no fabric");
  if (options_.id.empty() || options_.id.size() > wire::kMaxIdBytes || options_.id.front() == '\0')
    throw std::invalid_argument(
        "InprocTransport: peer id must be 1 to 255 bytes, not starting with a zero byte");
  endpoint_ = fabric_->attach(options_.id, this);
}

InprocTransport::~InprocTransport() {
  fabric_->detach(options_.id);
  drop_log_.flush(Clock::now(), true);
}

void InprocTransport::check_alive() const {
  std::lock_guard lock(endpoint_->mutex);
  if (endpoint_->killed) throw TransportError("endpoint '" + options_.id + "' was killed on its fabric");
}

void InprocTransport::connect(const std::string& peer_id, const std::string& address) {
  check_alive();
  if (!address.starts_with(kScheme))
    throw TransportError("in-process transport '" + options_.id + "': address '" + address + "' of peer '" +
                         peer_id + "' is not an in-process fabric address (" + std::string(kScheme) +
                         "<id>)");
  std::lock_guard lock(peers_mutex_);
  connected_[peer_id] = address;
}

std::string InprocTransport::address_of(const std::string& peer_id) const {
  std::lock_guard lock(peers_mutex_);
  auto it = connected_.find(peer_id);
  return it == connected_.end() ? std::string("(no address)") : it->second;
}

void InprocTransport::transmit(const std::string& peer_id, wire::Header header, Payload payload) {
  check_alive();
  std::string target = peer_id;
  {
    std::lock_guard lock(peers_mutex_);
    auto it = connected_.find(peer_id);
    if (it != connected_.end()) {
      // The fabric routes by the id in the address, as ZeroMQ routes by endpoint.
      target = it->second.substr(kScheme.size());
    } else if (!heard_from_.contains(peer_id)) {
      throw PeerError(PeerFailure::unknown_peer, peer_id, "(no address)",
                      "not connected; call connect() with its address first");
    }
  }
  std::vector<std::vector<std::uint8_t>> frames;
  frames.push_back(wire::encode_header(header));
  if (payload.has_frame()) frames.emplace_back(payload.bytes().begin(), payload.bytes().end());
  payload = Payload{};  // the bytes were copied: release the caller's buffer now
  const bool lossy = header.type != wire::MessageType::ping && header.type != wire::MessageType::pong;
  if (header.type != wire::MessageType::pong) {  // the fabric sends pongs itself, at once
    const InprocFabric::Fate fate = fabric_->fate(options_.id, target);
    if (fate.lost) return;  // lost on the way: the sender cannot tell
    if (fate.delay > std::chrono::nanoseconds::zero()) {
      fabric_->hold(std::chrono::steady_clock::now() + fate.delay, target, options_.id, std::move(frames));
      return;
    }
  }
  switch (fabric_->deliver(target, options_.id, frames, lossy)) {
    case InprocFabric::Delivery::delivered:
      return;
    case InprocFabric::Delivery::no_endpoint:
      throw PeerError(PeerFailure::unreachable, peer_id, address_of(peer_id), "no endpoint at this address");
    case InprocFabric::Delivery::killed:
      throw PeerError(PeerFailure::disconnected, peer_id, address_of(peer_id), "the endpoint was killed");
    case InprocFabric::Delivery::full:
      throw PeerError(PeerFailure::backpressure, peer_id, address_of(peer_id),
                      "its inbox is full; it is not receiving its messages");
  }
}

std::optional<wire::Header> InprocTransport::accept(const std::string& identity,
                                                    const std::vector<std::vector<std::uint8_t>>& frames) {
  static const std::vector<std::uint8_t> kNoFrame;
  const auto& header_frame = frames.empty() ? kNoFrame : frames[0];
  const auto& payload_frame = frames.size() == 2 ? frames[1] : kNoFrame;
  if (tap_refuses(identity)) return std::nullopt;  // e.g. a partition: as if it never arrived
  Admission admission = admit(frames.size(), header_frame, payload_frame, identity, Route::direct, options_.expect,
                              options_.max_payload_bytes);
  if (!admission.header) {
    counters_.record(admission.reason);
    drop_log_.drop(identity, admission.reason, admission.detail);
    return std::nullopt;
  }
  counters_.record_accepted();
  wire::Header& h = *admission.header;
  {
    std::lock_guard lock(peers_mutex_);
    heard_from_.insert(identity);
  }
  if (tap_takes(h)) return std::nullopt;  // e.g. a ping, answered across an emulated link
  if (h.type == wire::MessageType::ping) {
    wire::Header pong;
    pong.type = wire::MessageType::pong;
    pong.nonce = h.nonce;
    pong.step = h.step;
    stamp(pong, Payload{});
    return pong;
  }
  // The message owns a copy of the payload frame, as a ZeroMQ message owns its bytes.
  auto bytes = std::make_shared<const std::vector<std::uint8_t>>(payload_frame);
  const std::span<const std::uint8_t> view(*bytes);
  inbox().push(Message(std::move(h), view, std::move(bytes)));
  return std::nullopt;
}

void InprocTransport::peer_killed(const std::string& peer_id) {
  std::string address;
  {
    std::lock_guard lock(peers_mutex_);
    auto it = connected_.find(peer_id);
    if (it == connected_.end()) return;
    address = it->second;
  }
  inbox().push_error(std::make_exception_ptr(
      PeerError(PeerFailure::disconnected, peer_id, address, "the endpoint was killed (connection lost)")));
}

Counters InprocTransport::counters() const { return counters_.snapshot(); }

}  // namespace hearsay::transport
