#include "gossip/network/membership/membership.hpp"

#include <algorithm>
#include <random>
#include <stdexcept>

#include "base/log.hpp"
#include "base/thread_name.hpp"

namespace hearsay::membership {

namespace {

using wire::MessageType;

std::string ms(Clock::duration d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count()) + " ms";
}

// The local routing key of a seed whose id we do not know yet: sends to it go to its
// address, and its answer arrives under its real id.
std::string seed_key(const std::string& address) { return ("seed:" + address).substr(0, wire::kMaxIdBytes); }

bool is_membership_message(const transport::Message& m) {
  switch (m.type()) {
    case MessageType::hello:
    case MessageType::welcome:
    case MessageType::members:
    case MessageType::bye:
    case MessageType::refused:
      return true;
    default:
      return false;
  }
}

std::uint64_t default_incarnation() {
  const auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(since_epoch).count();
  return us > 0 ? static_cast<std::uint64_t>(us) : 1;
}

}  // namespace

std::string_view to_string(MemberState state) {
  switch (state) {
    case MemberState::alive:
      return "alive";
    case MemberState::suspect:
      return "suspect";
    case MemberState::dead:
      return "dead";
  }
  return "?";
}

std::string_view to_string(Change change) {
  switch (change) {
    case Change::joined:
      return "joined";
    case Change::suspected:
      return "suspected";
    case Change::died:
      return "died";
    case Change::left:
      return "left";
    case Change::revived:
      return "revived";
    case Change::restarted:
      return "restarted";
  }
  return "?";
}

Membership::Membership(transport::Transport& transport, MembershipOptions options)
    : transport_(transport), options_(std::move(options)), rng_(options_.rng_seed) {
  if (options_.heartbeat <= Clock::duration::zero())
    throw std::invalid_argument("membership: heartbeat must be positive");
  if (options_.suspect_after <= options_.heartbeat)
    throw std::invalid_argument("membership: suspect_after (" + ms(options_.suspect_after) +
                                ") must be longer than the heartbeat (" + ms(options_.heartbeat) + ")");
  if (options_.dead_after <= options_.suspect_after)
    throw std::invalid_argument("membership: dead_after (" + ms(options_.dead_after) +
                                ") must be longer than suspect_after (" + ms(options_.suspect_after) + ")");
  if (options_.fanout == 0) throw std::invalid_argument("membership: fanout must be at least 1");
  if (options_.join_retry <= Clock::duration::zero()) options_.join_retry = 5 * options_.heartbeat;
  if (options_.rng_seed == 0)
    rng_ = Rng((std::uint64_t{std::random_device{}()} << 32) | std::random_device{}());
  self_.id = transport_.id();
  self_.address = options_.advertised_address.empty() ? transport_.address() : options_.advertised_address;
  self_.incarnation = options_.incarnation != 0 ? options_.incarnation : default_incarnation();
  if (!valid_member_id(self_.id))
    throw std::invalid_argument("membership: peer id '" + self_.id +
                                "' cannot be a member id (1-255 bytes, no '=', no control characters)");
  if (!valid_member_address(self_.address))
    throw std::invalid_argument("membership: address '" + self_.address +
                                "' cannot be gossiped (1-1024 printable ASCII characters)");
}

Membership::~Membership() { stop(); }

void Membership::set_on_change(std::function<void(const MemberEvent&)> on_change) {
  std::lock_guard lock(mutex_);
  on_change_ = std::move(on_change);
}

void Membership::start() {
  if (thread_.joinable()) throw std::logic_error("membership of '" + self_.id + "' is already started");
  stopping_ = false;
  next_beat_ = Clock::now();
  next_join_ = Clock::now();
  thread_ = std::thread([this] {
    name_this_thread("hs-membership");
    run();
  });
}

void Membership::stop() noexcept {
  stopping_ = true;
  transport_.wake_control();
  if (thread_.joinable()) thread_.join();
}

void Membership::leave() {
  stop();
  std::vector<std::string> targets;
  std::vector<std::string> list;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [id, m] : members_)
      if (m.state != MemberState::dead) targets.push_back(id);
    list = {encode_entry(self_)};
  }
  for (const auto& id : targets) send(id, MessageType::bye, 0, list);
  logging::info("membership: '" + self_.id + "' left; said bye to " + std::to_string(targets.size()) +
                " member(s)");
}

std::vector<std::string> Membership::live_members() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> ids{self_.id};
  for (const auto& [id, m] : members_)
    if (m.state == MemberState::alive) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::optional<std::string> Membership::address_of(const std::string& id) const {
  if (id == self_.id) return self_.address;
  std::lock_guard lock(mutex_);
  auto it = members_.find(id);
  if (it == members_.end()) return std::nullopt;
  return it->second.address;
}

std::optional<MemberState> Membership::state_of(const std::string& id) const {
  if (id == self_.id) return MemberState::alive;
  std::lock_guard lock(mutex_);
  auto it = members_.find(id);
  if (it == members_.end()) return std::nullopt;
  return it->second.state;
}

std::vector<MemberInfo> Membership::members() const {
  std::lock_guard lock(mutex_);
  std::vector<MemberInfo> all;
  all.push_back({self_.id, self_.address, MemberState::alive, false, true, self_.incarnation, self_.heartbeat,
                 Clock::now()});
  for (const auto& [id, m] : members_)
    all.push_back({id, m.address, m.state, m.left, false, m.incarnation, m.heartbeat, m.last_heard});
  std::sort(all.begin(), all.end(), [](const MemberInfo& a, const MemberInfo& b) { return a.id < b.id; });
  return all;
}

std::optional<Refusal> Membership::refusal() const {
  std::lock_guard lock(mutex_);
  return refusal_;
}

MembershipCounters Membership::counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

void Membership::run() noexcept {
  for (;;) {
    // Taken before the stop flag is read: a stop() after this ends the wait below at once.
    const std::uint64_t ticket = transport_.control_wake_ticket();
    if (stopping_.load()) break;
    try {
      const auto now = Clock::now();
      if (now >= next_beat_) tick(now);
      auto message = transport_.receive_control(next_beat_, is_membership_message, ticket);
      if (message) handle(*message, Clock::now());
    } catch (const transport::PeerError& e) {
      {
        std::lock_guard lock(mutex_);
        ++counters_.peer_errors;
      }
      logging::debug("membership of '" + self_.id + "': " + e.what());
    } catch (const std::exception& e) {
      // Our own endpoint is broken (e.g. shut down): say so now and then, keep trying.
      warn_limited("transport", "membership of '" + self_.id + "': " + e.what());
      std::this_thread::sleep_until(std::min(next_beat_, Clock::now() + 20ms));
    } catch (...) {
      warn_limited("unknown", "membership of '" + self_.id + "': unknown error");
    }
  }
}

void Membership::tick(Clock::time_point now) {
  next_beat_ = now + options_.heartbeat;
  Events events;
  std::vector<std::string> targets;
  std::vector<std::string> list;
  bool alone = true;
  {
    std::lock_guard lock(mutex_);
    ++self_.heartbeat;
    forgive_own_pause(now);
    check_timeouts(now, events);
    std::vector<std::string> candidates;
    for (const auto& [id, m] : members_)
      if (m.state != MemberState::dead) candidates.push_back(id);
    alone = candidates.empty();
    // A partial Fisher-Yates shuffle picks `fanout` distinct targets.
    const std::size_t k = std::min(options_.fanout, candidates.size());
    for (std::size_t i = 0; i < k; ++i) {
      const std::size_t j = i + rng_.below(candidates.size() - i);
      std::swap(candidates[i], candidates[j]);
      targets.push_back(candidates[i]);
    }
    if (!targets.empty()) list = list_locked();
  }
  publish(events);
  for (const auto& id : targets) send(id, MessageType::members, 0, list);
  if (alone && now >= next_join_) {
    next_join_ = now + options_.join_retry;
    say_hello_to_seeds();
  }
}

void Membership::say_hello_to_seeds() {
  std::vector<std::string> own;
  {
    std::lock_guard lock(mutex_);
    own = {encode_entry(self_)};
  }
  for (const auto& address : options_.seeds) {
    if (address == self_.address) continue;
    {
      std::lock_guard lock(mutex_);
      ++counters_.seed_attempts;
    }
    std::string why;
    try {
      transport_.connect_seed(seed_key(address), address);
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (why.empty() && send(seed_key(address), MessageType::hello, 0, own, true, &why)) continue;
    std::uint64_t failures;
    {
      std::lock_guard lock(mutex_);
      failures = ++counters_.seed_failures;
    }
    warn_limited("seed " + address,
                 "membership of '" + self_.id + "': seed " + address + " is unreachable (" + why +
                     "); no live member known, retrying every " + ms(options_.join_retry) + " (" +
                     std::to_string(failures) +
                     " failed attempt(s) so far); check the seed address and that it runs");
  }
}

std::vector<std::string> Membership::list_locked() const {
  std::vector<Entry> entries{self_};
  for (const auto& [id, m] : members_)
    if (m.state != MemberState::dead) entries.push_back({id, m.address, m.incarnation, m.heartbeat});
  return encode_list(entries);
}

bool Membership::send(const std::string& to, wire::MessageType type, std::uint64_t nonce,
                      std::vector<std::string> members, bool with_address, std::string* error) {
  wire::Header header;
  header.type = type;
  header.nonce = nonce;
  header.members = std::move(members);
  if (with_address) header.address = self_.address;
  try {
    transport_.send(to, std::move(header));
    std::lock_guard lock(mutex_);
    ++counters_.sent;
    return true;
  } catch (const std::exception& e) {
    {
      std::lock_guard lock(mutex_);
      ++counters_.send_failures;
    }
    if (error) *error = e.what();
    logging::debug("membership of '" + self_.id + "': " + std::string(wire::to_string(type)) + " to '" + to +
                   "' failed: " + e.what());
    return false;
  }
}

void Membership::connect(const std::string& id, const std::string& address) {
  try {
    transport_.connect(id, address);
  } catch (const std::exception& e) {
    warn_limited("connect " + id, "membership of '" + self_.id + "': cannot connect to member '" + id +
                                      "' at " + address + ": " + e.what());
  }
}

void Membership::handle(const transport::Message& message, Clock::time_point now) {
  const auto& header = message.header();
  const std::string& sender = message.sender();
  ParsedList parsed = parse_list(header.members);
  // The sender's own entry, when it lists itself.
  std::optional<Entry> own;
  for (const auto& e : parsed.entries)
    if (e.id == sender) own = e;

  Events events;
  std::vector<std::pair<std::string, std::string>> to_connect;
  bool answer_hello = false;
  {
    std::lock_guard lock(mutex_);
    ++counters_.received;
    counters_.malformed_entries += parsed.malformed;
    switch (message.type()) {
      case MessageType::hello: {
        ++counters_.hellos;
        if (!valid_member_address(header.address) || !valid_member_id(sender)) {
          ++counters_.malformed_messages;
          break;
        }
        Entry joiner = own.value_or(Entry{sender, header.address, 0, 0});
        joiner.address = header.address;
        observe(joiner, true, now, events);
        answer_hello = true;
        break;
      }
      case MessageType::welcome:
      case MessageType::members:
        ++(message.type() == MessageType::welcome ? counters_.welcomes : counters_.member_lists);
        if (own) {
          observe(*own, true, now, events);
        } else if (auto it = members_.find(sender); it != members_.end()) {
          Entry known{sender, it->second.address, it->second.incarnation, it->second.heartbeat};
          observe(known, true, now, events);
        }
        break;
      case MessageType::bye:
        take_bye(sender, own, events);
        break;
      case MessageType::refused:
        // Kept from the first one: the joiner ends with it (NetworkNode::join_run).
        if (!refusal_)
          refusal_ = Refusal{sender, header.why, header.run_id, header.fingerprint};
        version_.fetch_add(1, std::memory_order_acq_rel);
        break;
      default:
        break;
    }
    if (message.type() != MessageType::bye && message.type() != MessageType::refused)
      for (const auto& e : parsed.entries)
        if (e.id != sender) observe(e, false, now, events);
  }
  if (parsed.malformed > 0)
    warn_limited("malformed " + sender, "membership of '" + self_.id + "': dropped " +
                                            std::to_string(parsed.malformed) + " malformed member entr" +
                                            (parsed.malformed == 1 ? "y" : "ies") + " from '" + sender + "'");
  for (const auto& e : events)
    if (e.change == Change::joined || e.change == Change::restarted) to_connect.emplace_back(e.id, e.address);
  if (answer_hello) to_connect.emplace_back(sender, header.address);
  for (const auto& [id, address] : to_connect) connect(id, address);
  if (answer_hello) {
    std::vector<std::string> list;
    {
      std::lock_guard lock(mutex_);
      list = list_locked();
    }
    send(sender, MessageType::welcome, header.nonce, std::move(list));
  }
  publish(events);
}

void Membership::take_bye(const std::string& sender, const std::optional<Entry>& own, Events& events) {
  ++counters_.byes;
  auto it = members_.find(sender);
  if (it == members_.end()) {
    // A member we had not heard of yet (its news was still on the way) that leaves: it was
    // in the run and is gone, which a peer waiting for every rank must know.
    if (!own || !valid_member_id(sender)) return;
    Member gone{own->address, MemberState::dead, true, own->incarnation, own->heartbeat, {}};
    members_.emplace(sender, gone);
    ++counters_.departures;
    events.push_back({Change::left, sender, own->address});
    return;
  }
  Member& m = it->second;
  if (own && own->incarnation < m.incarnation) return;  // an older life's farewell
  if (own) {
    // Gossip still carrying this farewell's heartbeat must not bring it back.
    m.incarnation = own->incarnation;
    m.heartbeat = std::max(m.heartbeat, own->heartbeat);
  }
  if (!m.left) {
    m.state = MemberState::dead;
    m.left = true;
    ++counters_.departures;
    events.push_back({Change::left, sender, m.address});
  }
}

void Membership::observe(const Entry& entry, bool direct, Clock::time_point now, Events& events) {
  if (entry.id == self_.id) {
    if (entry.incarnation > self_.incarnation)
      logging::warn("membership of '" + self_.id + "': another process claims our id '" + self_.id +
                    "' with a later incarnation; give every peer its own id");
    return;
  }
  auto [it, inserted] = members_.try_emplace(entry.id);
  Member& m = it->second;
  if (inserted) {
    m = {entry.address, MemberState::alive, false, entry.incarnation, entry.heartbeat, now};
    ++counters_.joins;
    events.push_back({Change::joined, entry.id, entry.address});
    return;
  }
  if (entry.incarnation < m.incarnation) return;  // news of an earlier life
  if (entry.incarnation > m.incarnation) {
    m = {entry.address, MemberState::alive, false, entry.incarnation, entry.heartbeat, now};
    ++counters_.restarts;
    events.push_back({Change::restarted, entry.id, entry.address});
    return;
  }
  // Same incarnation: only a newer heartbeat (or the member itself) is a sign of life.
  // A member that said bye stays gone until it beats again.
  const bool newer = entry.heartbeat > m.heartbeat;
  if (!newer && !(direct && !m.left)) return;
  m.heartbeat = std::max(m.heartbeat, entry.heartbeat);
  m.last_heard = now;
  if (m.state != MemberState::alive) {
    m.state = MemberState::alive;
    m.left = false;
    ++counters_.revivals;
    events.push_back({Change::revived, entry.id, m.address});
  }
}

// A heartbeat far later than due means this process did not run meanwhile (stopped, or
// its thread starved): nobody could be heard then, so that time is not counted as their
// silence. Without this, a peer frozen for longer than dead_after woke up and declared
// every other member dead, and went on training alone. Under mutex_.
void Membership::forgive_own_pause(Clock::time_point now) {
  const auto previous = std::exchange(last_tick_, now);
  if (!previous || now - *previous <= options_.suspect_after) return;
  const auto lost = now - *previous - options_.heartbeat;
  for (auto& [id, m] : members_)
    if (m.state != MemberState::dead) m.last_heard += lost;
  ++counters_.own_pauses;
  logging::warn("membership of '" + self_.id + "': this process did not run for " + ms(now - *previous) +
                " (stopped, or starved of CPU); the members' silence meanwhile is not held against them");
}

void Membership::check_timeouts(Clock::time_point now, Events& events) {
  for (auto& [id, m] : members_) {
    if (m.state == MemberState::dead) continue;
    const auto silence = now - m.last_heard;
    if (silence >= options_.dead_after) {
      m.state = MemberState::dead;
      ++counters_.deaths;
      events.push_back({Change::died, id, m.address});
    } else if (silence >= options_.suspect_after && m.state == MemberState::alive) {
      m.state = MemberState::suspect;
      ++counters_.suspicions;
      events.push_back({Change::suspected, id, m.address});
    }
  }
}

void Membership::publish(Events& events) {
  if (events.empty()) return;
  std::function<void(const MemberEvent&)> on_change;
  {
    std::lock_guard lock(mutex_);
    on_change = on_change_;
  }
  for (const auto& e : events) {
    version_.fetch_add(1, std::memory_order_acq_rel);
    // An owner that takes the changes (a peer) reports them itself: logged here too, each
    // change was in the log twice.
    const auto level = on_change ? logging::Level::debug
                       : e.change == Change::joined || e.change == Change::revived ||
                               e.change == Change::restarted || e.change == Change::left
                           ? logging::Level::info
                           : logging::Level::warn;
    logging::write(level,
                   "membership of '" + self_.id + "': '" + e.id + "' " + std::string(to_string(e.change)));
    if (!on_change) continue;
    try {
      on_change(e);
    } catch (const std::exception& ex) {
      warn_limited("callback", "membership of '" + self_.id + "': the change callback threw: " + ex.what());
    }
  }
  events.clear();
}

void Membership::warn_limited(const std::string& key, const std::string& message) {
  const auto now = Clock::now();
  {
    std::lock_guard lock(mutex_);
    auto [it, inserted] = last_warned_.try_emplace(key, now);
    if (!inserted) {
      if (now - it->second < 1s) return;
      it->second = now;
    }
  }
  logging::warn(message);
}

}  // namespace hearsay::membership
