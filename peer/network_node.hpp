// The network node, one part of a peer (peer_process.hpp): what connects this peer to the
// run. It owns the transport (ZeroMQ, hs-transport and hs-zap), membership
// (hs-membership), the state responder that answers late joiners (hs-state) and the HTTP
// status server (hs-http); it joins the run through the seeds, waits for the ranks, and
// says bye.
//
// Two steps, so that the control file's partitions hold before anyone is greeted: the
// constructor binds the transport (a port in use stops here); start() serves HTTP and
// starts membership and the state responder.
//
// Threads. The training thread calls everything but the hooks. Membership's thread logs
// each change, runs Hooks::members_changed, and wakes the training thread's waits for
// members (members_mutex_, members_changed_). hs-state and hs-http call their hooks,
// which must be safe from their threads.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "gossip/network/emulation/control_file.hpp"
#include "gossip/network/membership/membership.hpp"
#include "gossip/network/transport/zmq_transport.hpp"
#include "peer/metrics.hpp"
#include "peer/peer_config.hpp"
#include "peer/state_transfer.hpp"
#include "peer/status_server.hpp"

namespace hearsay {

class NetworkNode {
 public:
  struct Hooks {
    StateResponder::SnapshotFn state;       // hs-state: the training state a late joiner pulls
    StatusServer::SnapshotFn status;        // hs-http: what /metrics and /status show
    std::function<void()> members_changed;  // hs-membership: after every change
  };

  // Binds the transport for a model of `fingerprint` with `parameter_count` parameters
  // (they size the largest message). stop: set (by a signal handler) to end the waits.
  NetworkNode(const PeerConfig& cfg, std::string id, const std::atomic<bool>& stop,
              const std::string& fingerprint, std::int64_t parameter_count);
  // Stops what runs (stop()), then closes the transport. Never throws.
  ~NetworkNode();
  NetworkNode(const NetworkNode&) = delete;
  NetworkNode& operator=(const NetworkNode&) = delete;

  // Serves /metrics (--http), starts membership and the state responder.
  void start(Hooks hooks);
  // Where other machines reach us (the bound address, a wildcard host replaced by ours).
  const std::string& advertised_address() const noexcept { return advertised_; }

  // Joins through --join (the first peer of a run says how others join it instead);
  // PeerStartError when no seed answers within --join-timeout.
  void join_run();
  // With ranks (--algo of ranks, --wait-for-world): until every rank is alive;
  // PeerStartError after --join-timeout. A peer restarted with --resume (without
  // --wait-for-world) rejoins a run under way and waits for nobody: its neighbours may be
  // dead or cut off, and its rounds leave out those that do not answer until they do
  // (a restarted D-PSGD peer behind a partition waited for the ranks across it and failed).
  void wait_for_ranks(bool resumed);
  // With --min-peers N: until N peers, this one included, are alive, saying so every few
  // seconds; PeerStartError after --join-timeout.
  void wait_for_peers();
  // The live members but this peer.
  std::vector<std::string> live_neighbours() const;
  // The control file's network settings (the control file's watcher thread): the peers it
  // blocks (a partition) and, with --link-may-change, this peer's own link.
  void apply_control(const emulation::PeerControl& control);

  // ZeroMQ, maybe inside link emulation (make_transport in network_node.cpp).
  transport::Transport& transport() noexcept { return *transport_; }
  const membership::Membership& membership() const noexcept { return *membership_; }
  // The port /metrics is served on (after start()), or none without --http.
  std::optional<int> http_port() const { return http_ ? std::optional<int>(http_->port()) : std::nullopt; }

  // Any thread: the transport's drops and the live members, into m; returns every drop
  // (one of the refusals of exchanges_refused).
  std::uint64_t fill_counters(PeerMetrics& m) const;
  // Any thread: every member known, for /status.
  nlohmann::json members_json() const;

  // The state responder stops and membership says bye.
  void leave();
  // Stops the state responder, the HTTP server and membership (without a bye); the
  // transport stays open. Never throws.
  void stop() noexcept;

 private:
  using Clock = std::chrono::steady_clock;
  bool stopping() const { return stop_.load(); }
  void make_membership();
  // Waits, woken by membership's news, until missing() is "" (it names what is missing,
  // for the progress line); throws PeerStartError(timed_out(missing())) after
  // --join-timeout; returns at once on a stop request.
  void await_members(const std::function<std::string()>& missing,
                     const std::function<std::string(const std::string&)>& timed_out);
  // Until membership changes (its version differs from seen) or `at_most` passes.
  void wait_for_member_change(std::uint64_t seen, Clock::duration at_most);
  std::string join_failure() const;  // why no seed answered, and what to check
  // Why a seed refused us, in this peer's terms (its --run, its --model).
  std::string refused_message(const membership::Refusal& refusal) const;

  const PeerConfig& cfg_;
  const std::string id_;
  const std::atomic<bool>& stop_;
  const std::string fingerprint_;  // this peer's model's
  std::unique_ptr<transport::Transport> transport_;
  std::string advertised_;
  std::unique_ptr<membership::Membership> membership_;  // made before the HTTP server reads it
  std::unique_ptr<StateResponder> responder_;
  std::unique_ptr<StatusServer> http_;
  std::function<void()> on_members_changed_;
  std::mutex members_mutex_;
  std::condition_variable members_changed_;  // notified by membership's thread
};

}  // namespace hearsay
