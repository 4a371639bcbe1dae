#include "peer/network_node.hpp"

#include <filesystem>
#include <set>
#include <utility>

#include "base/log.hpp"
#include "base/rng.hpp"
#include "gossip/network/emulation/emulated_transport.hpp"
#include "gossip/network/transport/keys.hpp"
#include "peer/peer_errors.hpp"
#include "peer/run_output.hpp"

namespace hearsay {

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Where other machines reach us: the bound endpoint, with a wildcard host replaced by
// this machine's name (others cannot connect to 0.0.0.0).
std::string advertised(const std::string& bound) {
  // tcp://HOST:PORT[#KEY]; the host is bracketed when it is IPv6, and the key may hold ':'.
  if (bound.rfind("tcp://", 0) != 0 || bound.size() <= 6) return bound;
  const std::size_t close = bound[6] == '[' ? bound.find(']', 6) : std::string::npos;
  const std::size_t colon = bound.find(':', bound[6] == '[' ? close : 6);
  if (colon == std::string::npos) return bound;
  const std::string host = bound.substr(6, colon - 6);
  return is_wildcard_host(host) ? "tcp://" + this_host_name() + bound.substr(colon) : bound;
}

std::string joined(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

// The transport of this peer: ZeroMQ, with CurveZMQ unless --insecure, wrapped in link
// emulation when a link or fault setting asks for it (--link, --link-others, --link-peer;
// --control-file, whose partitions it cuts).
std::unique_ptr<transport::Transport> make_transport(const PeerConfig& cfg, const std::string& id,
                                                     const std::string& fingerprint,
                                                     std::int64_t parameter_count) {
  const auto& n = cfg.network;
  transport::ZmqOptions o;
  o.id = id;
  o.bind = n.listen;
  o.expect = {n.run, fingerprint};
  o.security.insecure = n.insecure;
  o.security.keys_dir = n.keys;
  o.security.authorized_dir = n.authorized;
  // The largest message is a state_reply: parameters and optimizer state (AdamW: 2x).
  o.max_payload_bytes = 4 * 3 * static_cast<std::uint64_t>(parameter_count) + 4096;
  auto zmq = std::make_unique<transport::ZmqTransport>(o);
  const auto& e = cfg.emulation;
  const bool links = !e.link.empty() || !e.link_others.empty() || !e.link_peers.empty();
  const bool hold_at_receiver = e.link_hold_at == "receiver";
  if (!links && e.control_file.empty() && !hold_at_receiver && !e.link_may_change) return zmq;
  emulation::EmulationOptions options;
  options.links = link_emulation(cfg);
  options.send_queue = o.send_queue;
  options.linger = o.linger;
  options.hold_at_receiver = hold_at_receiver;
  options.links_may_change = e.link_may_change;
  if (links)
    logging::info(options.links.enabled() ? "emulating links: " + emulation::describe(options.links)
                                          : "link emulation: the links given change nothing (" +
                                                emulation::describe(options.links) + ")");
  return std::make_unique<emulation::EmulatedTransport>(std::move(zmq), std::move(options));
}

}  // namespace

NetworkNode::NetworkNode(const PeerConfig& cfg, std::string id, const std::atomic<bool>& stop,
                         const std::string& fingerprint, std::int64_t parameter_count)
    : cfg_(cfg),
      id_(std::move(id)),
      stop_(stop),
      fingerprint_(fingerprint),
      transport_(make_transport(cfg, id_, fingerprint, parameter_count)),
      advertised_(advertised(transport_->address())) {}

NetworkNode::~NetworkNode() {
  // Order matters: the responder and membership use the transport.
  stop();
  membership_.reset();
  transport_.reset();
}

void NetworkNode::start(Hooks hooks) {
  on_members_changed_ = std::move(hooks.members_changed);
  make_membership();
  if (!cfg_.output.http.empty()) {
    http_ = std::make_unique<StatusServer>(cfg_.output.http, std::move(hooks.status));
    logging::info("serving /metrics and /status on port " + std::to_string(http_->port()));
  }
  membership_->start();
  responder_ = std::make_unique<StateResponder>(*transport_, std::move(hooks.state));
}

void NetworkNode::make_membership() {
  membership::MembershipOptions m;
  m.seeds = join_addresses(cfg_.network);
  m.advertised_address = advertised_;
  m.heartbeat = std::chrono::duration_cast<Clock::duration>(cfg_.membership.heartbeat);
  m.suspect_after = std::chrono::duration_cast<Clock::duration>(cfg_.membership.suspect_after);
  m.dead_after = std::chrono::duration_cast<Clock::duration>(cfg_.membership.dead_after);
  m.rng_seed = cfg_.train.seed ^ stable_hash(id_) ^ 0x6d656d62ULL;
  membership_ = std::make_unique<membership::Membership>(*transport_, m);
  membership_->set_on_change([this](const membership::MemberEvent& e) {
    using membership::Change;
    const auto level = e.change == Change::suspected || e.change == Change::died ? logging::Level::warn
                                                                                 : logging::Level::info;
    logging::write(level, "member '" + e.id + "' " + std::string(membership::to_string(e.change)) +
                              (e.change == membership::Change::joined ? " (" + e.address + ")" : ""));
    if (on_members_changed_) on_members_changed_();
    { std::lock_guard lock(members_mutex_); }
    members_changed_.notify_all();
  });
}

void NetworkNode::join_run() {
  const auto& seeds = cfg_.network.join;
  if (seeds.empty()) {
    // One shell word: a CURVE address ends in a Z85 key, whose > < ( ) & $ ! # a shell reads.
    const std::string& address = advertised_;
    logging::info("first peer of the run: others join with --join " + shell_word(address));
    if (const auto hash = address.find('#'); hash != std::string::npos && !cfg_.network.keys.empty())
      logging::info(
          "or with the key from its file: --join " + shell_word(address.substr(0, hash)) + " --join-key " +
          shell_word((std::filesystem::path(cfg_.network.keys) / transport::kPublicKeyFile).string()));
    return;
  }
  await_members(
      [&] {
        // A seed that refused us said why: that is the end, not something to retry.
        if (const auto refusal = membership_->refusal()) throw PeerStartError(refused_message(*refusal));
        return membership_->live_members().size() >= 2 ? "" : "an answer from " + joined(seeds);
      },
      [&](const std::string&) { return join_failure(); });
  if (!stopping())
    logging::info("joined the run: " + std::to_string(membership_->live_members().size()) + " live members");
}

std::string NetworkNode::refused_message(const membership::Refusal& r) const {
  std::string why;
  if (r.run_id != cfg_.network.run) {
    why = "the run is '" + r.run_id + "' and this peer's --run is '" + cfg_.network.run + "': give it --run '" +
          r.run_id + "'";
  } else if (r.fingerprint != fingerprint_) {
    // A fingerprint starts with the model's name: "lenet-129068-49e7819947dd1a80".
    const auto model_of = [](const std::string& fp) { return fp.substr(0, fp.find('-')); };
    const std::string theirs = model_of(r.fingerprint), ours = model_of(fingerprint_);
    // A model of another program (the Python module's: "torch-COUNT-HASH") is its
    // parameters' names and shapes: another fingerprint is another model.
    const bool external = theirs == "torch" || ours == "torch";
    why = external ? "the run's model is " + r.fingerprint + " and this peer's " + fingerprint_ +
                         " (names and shapes of the parameters): attach the same model on every peer"
          : theirs != ours ? "the run uses --model " + theirs + ", this peer --model " + ours +
                                 ": start it with --model " + theirs
                           : "the run's " + theirs + " is " + r.fingerprint + ", this peer's " +
                                 fingerprint_ + ": another hearsay version; run the same build on every peer";
  } else {
    why = r.why;
  }
  return "could not join the run: '" + r.from + "' refused this peer: " + why;
}

std::string NetworkNode::join_failure() const {
  const auto c = membership_->counters();
  std::string why = "could not join the run: no peer answered from " + joined(cfg_.network.join) +
                    " within " + format_duration(cfg_.membership.join_timeout) + ".\n";
  if (c.seed_failures > 0)
    why += "  The connection failed " + std::to_string(c.seed_failures) +
           " time(s): is a hearsay peer running there, and is it reachable from this machine (host, "
           "port, firewall)?\n";
  else
    why += "  Is a hearsay peer running at that address, and reachable from this machine?\n";
  why += "  Does it use the same --run ('" + cfg_.network.run + "') and --model ('" + cfg_.train.model +
         "')? It logs 'wrong_run' or 'wrong_fingerprint' for our messages otherwise.\n";
  why += cfg_.network.insecure ? "  Does it use --insecure too?"
                               : "  Does each side's --authorized directory hold the other's public key?";
  return why;
}

void NetworkNode::wait_for_ranks(bool resumed) {
  if (!(uses_ranks(cfg_.mixing.algo) || cfg_.network.wait_for_world) || stopping()) return;
  if (resumed && !cfg_.network.wait_for_world) {
    logging::info(
        "resumed into a run under way: not waiting for every rank; rounds leave out the "
        "neighbours that do not answer until they do");
    return;
  }
  const int world = cfg_.network.world;
  await_members(
      [&] {
        // A rank that joined and has left already (a short run it finished) is not awaited.
        std::set<std::string> departed;
        for (const auto& m : membership_->members())
          if (m.left) departed.insert(m.id);
        std::vector<std::string> missing;
        for (int r = 0; r < world; ++r) {
          const std::string id = rank_peer_id(r);
          const auto state = membership_->state_of(id);
          if (id != id_ && !departed.count(id) && (!state || *state != membership::MemberState::alive))
            missing.push_back(id);
        }
        return missing.empty() ? "" : joined(missing) + " to join";
      },
      [&](const std::string& missing) {
        const std::string who =
            uses_ranks(cfg_.mixing.algo) ? "--algo " + cfg_.mixing.algo : std::string("--wait-for-world");
        return who + " needs all " + std::to_string(world) + " ranks, and after " +
               format_duration(cfg_.membership.join_timeout) + " it still waits for " + missing +
               ": start them (with --join to a live peer), or lower --world";
      });
}

void NetworkNode::wait_for_peers() {
  const int wanted = cfg_.network.min_peers;
  if (wanted <= 1 || stopping()) return;
  const auto now_live = [&] { return membership_->live_members(); };
  if (static_cast<int>(now_live().size()) < wanted)
    logging::info("waiting for " + std::to_string(wanted) + " live peers before training (--min-peers); others join with --join " +
                  shell_word(advertised_));
  await_members(
      [&] {
        const auto live = now_live();
        const int missing = wanted - static_cast<int>(live.size());
        if (missing <= 0) return std::string();
        return std::to_string(missing) + " more peer" + (missing == 1 ? "" : "s") + " (live now: " +
               joined(live) + ")";
      },
      [&](const std::string& missing) {
        return "--min-peers " + std::to_string(wanted) + ": after " + format_duration(cfg_.membership.join_timeout) +
               " this peer still waits for " + missing + ": start the others with --join " + shell_word(advertised_) +
               ", raise --join-timeout, or lower --min-peers";
      });
  if (!stopping())
    logging::info(std::to_string(membership_->live_members().size()) + " peers live: training starts (--min-peers " +
                  std::to_string(wanted) + ")");
}

void NetworkNode::await_members(const std::function<std::string()>& missing,
                                const std::function<std::string(const std::string&)>& timed_out) {
  const auto timeout = std::chrono::duration_cast<Clock::duration>(cfg_.membership.join_timeout);
  const auto start = Clock::now();
  auto next_note = start + 5s;
  for (;;) {
    const auto version = membership_->version();
    const std::string what = missing();
    if (what.empty() || stopping()) return;
    const auto now = Clock::now();
    if (now - start >= timeout) throw PeerStartError(timed_out(what));
    if (now >= next_note) {
      logging::info("waiting for " + what + " (" + std::to_string(static_cast<int>(seconds(now - start))) +
                    " s)");
      next_note = now + 5s;
    }
    wait_for_member_change(version, 200ms);
  }
}

void NetworkNode::wait_for_member_change(std::uint64_t seen, Clock::duration at_most) {
  // Bounded, so that a stop request (a flag set by a signal handler) is seen promptly.
  std::unique_lock lock(members_mutex_);
  members_changed_.wait_for(lock, at_most, [&] { return membership_->version() != seen; });
}

std::vector<std::string> NetworkNode::live_neighbours() const {
  std::vector<std::string> ids = membership_->live_members();
  std::erase(ids, id_);
  return ids;
}

std::uint64_t NetworkNode::fill_counters(PeerMetrics& m) const {
  const auto c = transport_->counters();
  m.dropped = c.dropped;
  m.live_members = membership_ ? static_cast<std::int64_t>(membership_->live_members().size()) : 1;
  return c.total_dropped();
}

nlohmann::json NetworkNode::members_json() const {
  nlohmann::json members = nlohmann::json::array();
  if (!membership_) return members;
  for (const auto& m : membership_->members())
    members.push_back({{"id", m.id},
                       {"address", m.address},
                       {"state", membership::to_string(m.state)},
                       {"left", m.left},
                       {"self", m.self}});
  return members;
}

void NetworkNode::leave() {
  responder_.reset();
  if (membership_) membership_->leave();
}

void NetworkNode::stop() noexcept {
  responder_.reset();
  http_.reset();
  if (membership_) membership_->stop();
}

void NetworkNode::apply_control(const emulation::PeerControl& control) {
  // With a control file the transport is always emulated (make_transport).
  auto* emulated = dynamic_cast<emulation::EmulatedTransport*>(transport_.get());
  if (emulated == nullptr) return;
  emulated->set_blocked(control.blocked);
  if (cfg_.emulation.link_may_change)
    emulated->set_own_link(control.link);
  else if (control.link)
    logging::warn("control file: a 'link' line needs --link-may-change; this peer's link stays");
}

}  // namespace hearsay
