// ExternalPeer: a peer's network and mixer over a caller's buffer (external_peer.hpp).
#include "peer/external_peer.hpp"

#include <algorithm>
#include <stdexcept>

#include "base/log.hpp"
#include "peer/peer_errors.hpp"

namespace hearsay {

PeerConfig parse_external_peer_settings(const std::vector<std::string>& args) {
  PeerConfig cfg;
  CLI::App app("hearsay peer (external)", "hearsay");
  add_peer_options(app, cfg);
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them last first
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    throw std::invalid_argument(app.help());
  } catch (const CLI::ParseError& e) {
    throw std::invalid_argument(e.what());
  }
  expand_per_peer_paths(cfg);
  validate(cfg);
  return cfg;
}

ExternalPeer::ExternalPeer(PeerConfig cfg)
    : cfg_(std::move(cfg)),
      traits_(algorithms::find_algorithm(cfg_.mixing.algo)),
      id_(peer_id(cfg_)),
      mixer_(cfg_, traits_, id_) {}

ExternalPeer::~ExternalPeer() {
  try {
    close();
  } catch (const std::exception& e) {
    logging::warn(std::string("closing the peer: ") + e.what());
  }
  mixer_.stop();
  if (network_) network_->stop();
}

void ExternalPeer::attach(float* data, std::size_t count, const std::string& fingerprint) {
  if (closed_) throw std::runtime_error("attach: the peer is closed; make a new one");
  if (store_) throw std::runtime_error("attach: the peer already has parameters; a peer takes one model");
  if (data == nullptr || count == 0) throw std::invalid_argument("attach: no parameters (an empty model)");
  store_.emplace(std::span<float>(data, count));
  try {
    connect(fingerprint);
  } catch (...) {
    // Half a peer is no peer: its port is freed, and it can only be closed.
    closed_ = true;
    mixer_.stop();
    if (network_) network_->stop();  // its threads call the hooks, which use network_
    network_.reset();
    store_.reset();
    throw;
  }
}

void ExternalPeer::connect(const std::string& fingerprint) {
  const std::size_t count = store_->size();
  network_ = std::make_unique<NetworkNode>(cfg_, id_, stop_, fingerprint, static_cast<std::int64_t>(count));
  NetworkNode::Hooks hooks;
  // A late joiner that pulls a state gets the parameters as they are (read without a
  // lock, as a partner's average may be mid-update: it is a starting point).
  hooks.state = [this] {
    TrainingSnapshot s;
    s.params.assign(store_->size(), 0.0f);
    store_->read(s.params);
    s.step = last_step_.load();
    return s;
  };
  hooks.status = [this] { return status(); };
  hooks.members_changed = [this] { mixer_.members_changed(network_->membership()); };
  network_->start(std::move(hooks));
  logging::info("peer '" + id_ + "' of run '" + cfg_.network.run + "' listening at " +
                network_->advertised_address() + " (" + std::to_string(count) + " parameters, " +
                fingerprint + ")");
  network_->join_run();
  network_->wait_for_ranks(cfg_.checkpoint.resume);
  network_->wait_for_peers();
  if (traits_ == nullptr) return;  // --algo none: trains alone
  mixer_.start(network_->transport(), network_->membership(), 0, *store_);
  // Partners' first requests are answered from now on, not only after the first step.
  mixer_.flush(*store_);
}

void ExternalPeer::check_usable(const char* what) const {
  if (closed_)
    throw std::runtime_error(std::string(what) + ": the peer is closed (close() said bye to the run)");
  if (!store_) throw std::runtime_error(std::string(what) + ": no parameters yet; attach a model first");
}

void ExternalPeer::after_step(std::uint64_t step) {
  check_usable("after_step");
  last_step_ = step;
  mixer_.after_update(*store_, step);
}

void ExternalPeer::close() {
  if (closed_) return;
  closed_ = true;
  if (!store_) return;
  try {
    mixer_.flush(*store_);
  } catch (const std::exception& e) {
    logging::warn(std::string("last mixing round failed: ") + e.what());
  }
  mixer_.stop();
  network_->leave();
}

std::string ExternalPeer::address() const { return network_ ? network_->advertised_address() : ""; }

std::int64_t ExternalPeer::live_members() const {
  if (!network_) return 1;
  PeerMetrics m;
  network_->fill_counters(m);
  return std::max<std::int64_t>(m.live_members, 1);
}

StatusServer::Snapshot ExternalPeer::status() {
  StatusServer::Snapshot s;
  const auto t = mixer_.totals().exchanges;
  s.metrics.bytes_sent = t.bytes_sent;
  s.metrics.bytes_received = t.bytes_received;
  s.metrics.exchanges_ok = t.ok;
  s.metrics.exchanges_timed_out = t.timed_out;
  s.metrics.exchanges_busy = t.busy;
  network_->fill_counters(s.metrics);
  s.status["members"] = network_->members_json();
  s.status["state"] = closed_ ? "ending" : "training";
  s.status["algo"] = cfg_.mixing.algo;
  return s;
}

}  // namespace hearsay
