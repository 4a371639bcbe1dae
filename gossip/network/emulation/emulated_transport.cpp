#include "gossip/network/emulation/emulated_transport.hpp"

#include <algorithm>
#include <iterator>
#include <stdexcept>

#include "base/crash_report.hpp"
#include "base/log.hpp"
#include "base/thread_name.hpp"

namespace hearsay::emulation {

using transport::Payload;
using transport::PeerError;
using transport::PeerFailure;

namespace {

// What a PeerError says after its "peer 'ID' at ADDRESS: " prefix.
std::string detail_of(const PeerError& e) {
  const std::string what = e.what();
  const std::string prefix = "peer '" + e.peer_id() + "' at " + e.address() + ": ";
  return what.starts_with(prefix) ? what.substr(prefix.size()) : what;
}

transport::Transport& wrapped(const std::unique_ptr<transport::Transport>& inner) {
  if (!inner) throw std::invalid_argument("EmulatedTransport: no transport to wrap");
  return *inner;
}

}  // namespace

EmulatedTransport::EmulatedTransport(std::unique_ptr<transport::Transport> inner, EmulationOptions options)
    : Transport(wrapped(inner)), inner_(std::move(inner)), id_(inner_->id()), options_(std::move(options)) {
  if (options_.links.enabled() || options_.links_may_change) line_.emplace(options_.links, id_);
  if (options_.hold_at_receiver) inbox().set_hold_until_due(true);
  if (line_) thread_ = fiber::Worker("hs-link", [this] { run(); });
  inner_->set_tap(this);
}

EmulatedTransport::~EmulatedTransport() {
  {
    std::lock_guard lock(line_mutex_);
    stopping_ = true;
    stop_deadline_ = Clock::now() + options_.linger;
  }
  line_changed_.notify_all();
  if (thread_.joinable()) thread_.join();
  // The wrapped transport calls the tap until its threads stop: it goes first. reset()
  // empties inner_ before the transport's destructor runs, so the tap must not use it.
  inner_.reset();
}

void EmulatedTransport::connect(const std::string& peer_id, const std::string& address) {
  inner_->connect(peer_id, address);
  if (!line_) return;
  std::lock_guard lock(known_mutex_);
  known_.insert(peer_id);
}

void EmulatedTransport::connect_seed(const std::string& key, const std::string& address) {
  inner_->connect_seed(key, address);
  if (!line_) return;
  std::lock_guard lock(known_mutex_);
  known_.insert(key);
}

void EmulatedTransport::transmit(const std::string& peer_id, wire::Header header, Payload payload) {
  if (any_blocked_.load() && is_blocked(peer_id)) {  // partitioned: lost without a word
    blocked_sent_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (!line_)
    inner_->transmit(peer_id, std::move(header), std::move(payload));
  else if (options_.hold_at_receiver)
    send_stamped(peer_id, std::move(header), std::move(payload));
  else
    delay(peer_id, std::move(header), std::move(payload));
}

void EmulatedTransport::set_blocked(std::vector<std::string> peer_ids) {
  std::unordered_set<std::string> next(std::make_move_iterator(peer_ids.begin()),
                                       std::make_move_iterator(peer_ids.end()));
  std::lock_guard lock(blocked_mutex_);
  blocked_.swap(next);
  any_blocked_.store(!blocked_.empty());
}

void EmulatedTransport::set_own_link(const std::optional<LinkSpec>& link) {
  if (!line_)
    throw std::logic_error(
        "EmulatedTransport::set_own_link: no delay line (set EmulationOptions::links_may_change)");
  std::lock_guard lock(line_mutex_);
  line_->schedule().set_self(link.value_or(options_.links.self));
}

EmulationCounters EmulatedTransport::emulation_counters() const {
  EmulationCounters c;
  c.delayed = delayed_.load(std::memory_order_relaxed);
  c.lost = lost_.load(std::memory_order_relaxed);
  c.duplicated = duplicated_.load(std::memory_order_relaxed);
  c.reordered = reordered_.load(std::memory_order_relaxed);
  c.blocked_sent = blocked_sent_.load(std::memory_order_relaxed);
  c.blocked_received = blocked_received_.load(std::memory_order_relaxed);
  return c;
}

bool EmulatedTransport::is_blocked(const std::string& peer) const {
  std::lock_guard lock(blocked_mutex_);
  return blocked_.contains(peer);
}

bool EmulatedTransport::refuse(const std::string& sender) noexcept {
  if (!any_blocked_.load() || !is_blocked(sender)) return false;
  blocked_received_.fetch_add(1, std::memory_order_relaxed);  // partitioned: as if it never arrived
  return true;
}

bool EmulatedTransport::take(const wire::Header& header) noexcept {
  if (!line_) return false;  // partitions only: the wrapped transport answers pings itself
  try {
    {
      std::lock_guard lock(known_mutex_);
      known_.insert(header.sender);  // send() can reach it now, through its connection
    }
    if (header.type != wire::MessageType::ping) return false;
    delay_pong(header);
  } catch (const std::exception&) {
    // Out of memory: the ping is lost, as on a congested link; it will ping again.
  }
  return true;
}

void EmulatedTransport::check_known(const std::string& peer) const {
  bool known = false;
  {
    std::lock_guard lock(known_mutex_);
    known = known_.contains(peer);
  }
  // The check the wrapped transport makes at once, made now: later there is no caller to tell.
  if (!known)
    throw PeerError(PeerFailure::unknown_peer, peer, inner_->address_of(peer),
                    "not connected and no connection from it: call connect() with its address first");
}

std::optional<LinkSchedule::Sent> EmulatedTransport::take_uplink(const std::string& peer, std::uint64_t bytes,
                                                                 Outgoing out, Clock::time_point at) {
  std::optional<std::optional<LinkSchedule::Sent>> taken;  // none: the line to it is full
  {
    std::lock_guard lock(line_mutex_);
    if (!line_full_locked(peer, Clock::now())) taken = line_->push_timed(peer, bytes, std::move(out), at);
  }
  if (!taken)
    throw PeerError(
        PeerFailure::backpressure, peer, inner_->address_of(peer),
        std::to_string(options_.send_queue) +
            " messages already wait in the emulated link to it: the link is too slow for this traffic");
  count(*taken);
  return *taken;
}

void EmulatedTransport::count(const std::optional<LinkSchedule::Sent>& sent) noexcept {
  (sent ? delayed_ : lost_).fetch_add(1, std::memory_order_relaxed);
  if (sent && sent->copies > 1) duplicated_.fetch_add(1, std::memory_order_relaxed);
  if (sent && sent->reordered) reordered_.fetch_add(1, std::memory_order_relaxed);
}

bool EmulatedTransport::line_full_locked(const std::string& peer, Clock::time_point now) {
  // Held at the receiver, the line keeps a token of each message still on its emulated
  // way (for the send queue): those whose time has passed have arrived.
  if (options_.hold_at_receiver) line_->pop_due(now, [](Outgoing&) {});
  return line_->queued(peer) >= static_cast<std::size_t>(std::max(1, options_.send_queue));
}

void EmulatedTransport::delay(const std::string& peer, wire::Header header, Payload payload) {
  check_known(peer);
  const std::uint64_t bytes = wire::encode_header(header).size() + payload.bytes().size();
  if (take_uplink(peer, bytes, Outgoing{peer, std::move(header), std::move(payload)}, Clock::now()))
    line_changed_.notify_all();
}

void EmulatedTransport::send_stamped(const std::string& peer, wire::Header header, Payload payload) {
  check_known(peer);
  const std::uint64_t bytes = wire::encode_header(header).size() + payload.bytes().size();
  const auto sent = take_uplink(peer, bytes, Outgoing{}, Clock::now());
  if (!sent) return;  // lost on the emulated link
  header.due_ns = transport::due_ns_of(sent->release);
  // A failure here (the peer's queue is full, it left) is the caller's, as without emulation;
  // its token still holds the uplink, as a message sent and then lost would.
  if (sent->copies > 1) inner_->transmit(peer, header, payload);  // the duplicate, due with it
  inner_->transmit(peer, std::move(header), std::move(payload));
}

void EmulatedTransport::delay_pong(const wire::Header& ping) {
  Outgoing out;
  out.peer = ping.sender;
  out.header.type = wire::MessageType::pong;
  out.header.nonce = ping.nonce;
  out.header.step = ping.step;
  out.pong = true;
  stamp(out.header, out.payload);
  const std::uint64_t bytes = wire::encode_header(out.header).size();
  std::optional<LinkSchedule::Sent> sent;
  {
    std::lock_guard lock(line_mutex_);
    if (stopping_) return;  // closing: nobody to answer for
    const auto now = Clock::now();
    if (line_full_locked(out.peer, now)) return;  // as with a full send queue: it will ping again
    const std::string peer = out.peer;
    if (options_.hold_at_receiver) {
      // Answered when the ping is due here, sent at once, held by the pinger until its due.
      sent = line_->push_timed(peer, bytes, Outgoing{}, std::max(now, transport::due_time(ping.due_ns)));
      if (sent) {
        out.header.due_ns = transport::due_ns_of(sent->release);
        if (sent->copies > 1) pongs_.push_back(out);
        pongs_.push_back(std::move(out));
      }
    } else {
      sent = line_->push_timed(peer, bytes, std::move(out), now);
    }
  }
  count(sent);
  const bool kept = sent.has_value();
  if (kept) line_changed_.notify_all();
}

// Releases messages in release order (send order among equal times, and so per peer) and
// hands them over outside the lock. Stopping, those due within the linger still go.
void EmulatedTransport::run() {
  if (fiber::Scheduler::current() == nullptr) {  // a thread (a fiber shares its scheduler's)
    block_async_signals_in_this_thread();        // signals are for the application's threads
  }
  std::unique_lock lock(line_mutex_);
  if (options_.hold_at_receiver) {
    run_pongs(lock);
    return;
  }
  std::vector<Outgoing> due;
  for (;;) {
    line_->pop_due(Clock::now(), [&](Outgoing& out) { due.push_back(std::move(out)); });
    if (!due.empty()) {
      lock.unlock();
      for (Outgoing& out : due) hand_over(out);
      due.clear();  // the payloads' owners are released here, outside the lock
      lock.lock();
      continue;
    }
    const auto next = line_->next_due();
    if (stopping_ && (!next || *next > stop_deadline_)) break;
    if (next)
      line_changed_.wait_until(lock, *next);
    else
      line_changed_.wait(lock);
  }
  line_->clear();  // never sent: the payloads' owners are released
}

// hold_at_receiver: hands over the pongs the tap answered (the inbox holds arrivals).
void EmulatedTransport::run_pongs(std::unique_lock<std::mutex>& lock) {
  std::vector<Outgoing> pongs;
  for (;;) {
    pongs.swap(pongs_);
    if (!pongs.empty()) {
      lock.unlock();
      for (Outgoing& out : pongs) hand_over(out);
      pongs.clear();
      lock.lock();
      continue;
    }
    if (stopping_) break;
    line_changed_.wait(lock);
  }
}

void EmulatedTransport::hand_over(Outgoing& out) noexcept {
  if (any_blocked_.load() && is_blocked(out.peer)) {  // partitioned while it was on its way
    blocked_sent_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  try {
    inner_->transmit(out.peer, std::move(out.header), std::move(out.payload));
  } catch (const std::exception& e) {
    // The caller's send() returned long ago: what fails now is an asynchronous PeerError.
    if (!out.pong) report_late_failure(out.peer, e);  // a pinger that is gone needs no answer
  }
}

void EmulatedTransport::report_late_failure(const std::string& peer, const std::exception& e) noexcept {
  try {
    const auto* peer_error = dynamic_cast<const PeerError*>(&e);
    const PeerError error =
        peer_error
            ? PeerError(peer_error->failure(), peer, peer_error->address(),
                        "when a message delayed by link emulation was due: " + detail_of(*peer_error) +
                            "; the message was dropped")
            : PeerError(PeerFailure::disconnected, peer, inner_->address_of(peer),
                        std::string("handing over a message delayed by link emulation failed: ") + e.what());
    logging::debug("peer '" + id() + "': " + error.what());
    inbox().push_error(std::make_exception_ptr(error));
  } catch (...) {
    // Out of memory while reporting: the message is lost either way.
  }
}

}  // namespace hearsay::emulation
