#include "peer/state_transfer.hpp"

#include <atomic>
#include <map>
#include <random>
#include <set>

#include "base/log.hpp"
#include "base/thread_name.hpp"

namespace hearsay {

namespace {

using namespace std::chrono_literals;
using transport::Clock;
using wire::MessageType;

bool is_state_request(const transport::Message& m) { return m.type() == MessageType::state_request; }

// The state a state_reply from `peer` carries, or nullopt (logged) when it is not
// parameter_count parameters followed by the optimizer state that parts announces.
std::optional<PulledState> decode_state_reply(const transport::Message& reply, const std::string& peer,
                                              std::size_t parameter_count) {
  const auto& parts = reply.header().parts;
  if (parts.size() < 2 || parts[0] != parameter_count || parts[0] + parts[1] != reply.count()) {
    logging::warn("'" + peer + "' answered the state request with a state of another shape (" +
                  std::to_string(reply.count()) + " values, expected " + std::to_string(parameter_count) +
                  " parameters first); left out");
    return std::nullopt;
  }
  const std::vector<float> flat = reply.decode();
  PulledState pulled;
  pulled.from = peer;
  pulled.state.step = reply.header().step;
  const auto split = flat.begin() + static_cast<std::ptrdiff_t>(parts[0]);
  pulled.state.params.assign(flat.begin(), split);
  pulled.state.optimizer_state.assign(split, flat.end());
  return pulled;
}

}  // namespace

StateResponder::StateResponder(transport::Transport& transport, SnapshotFn snapshot)
    : transport_(transport), snapshot_(std::move(snapshot)), thread_([this] {
        name_this_thread("hs-state");
        run();
      }) {}

StateResponder::~StateResponder() {
  stopping_.store(true);
  transport_.wake_control();
  if (thread_.joinable()) thread_.join();
}

void StateResponder::run() noexcept {
  for (;;) {
    // Taken before the stop flag is read: the destructor's wake ends the wait below.
    const std::uint64_t ticket = transport_.control_wake_ticket();
    if (stopping_.load()) break;
    std::string asker;
    try {
      // The bound only limits the damage of a missed wake-up.
      auto request = transport_.receive_control(Clock::now() + 1s, is_state_request, ticket);
      if (!request) continue;
      asker = request->sender();
      TrainingSnapshot s = snapshot_();
      std::vector<float> flat;
      flat.reserve(s.params.size() + s.optimizer_state.size());
      flat.insert(flat.end(), s.params.begin(), s.params.end());
      flat.insert(flat.end(), s.optimizer_state.begin(), s.optimizer_state.end());
      wire::Header reply;
      reply.type = MessageType::state_reply;
      reply.nonce = request->header().nonce;
      reply.step = s.step;
      reply.parts = {s.params.size(), s.optimizer_state.size()};
      transport_.send(asker, std::move(reply), transport::Payload::copy_f32(flat));
      served_.fetch_add(1);
      logging::info("sent the training state (step " + std::to_string(s.step) + ") to '" + asker + "'");
    } catch (const transport::PeerError& e) {
      // The asker (or any other peer) broke: the asker will ask someone else.
      logging::debug(std::string("state responder: ") + e.what());
    } catch (const std::exception& e) {
      logging::warn("could not send the training state to '" + asker + "': " + e.what());
      if (stopping_.load()) break;
      std::this_thread::yield();
    }
  }
}

std::optional<PulledState> pull_state(transport::Transport& transport,
                                      std::span<const std::string> candidates, std::size_t parameter_count,
                                      Clock::duration timeout) {
  for (const auto& peer : candidates) {
    if (peer == transport.id()) continue;
    const auto deadline = Clock::now() + timeout;
    // A stored error about another peer surfaces through whichever call comes next;
    // it says nothing about this one, which is asked again.
    for (int attempt = 0; attempt < 8 && Clock::now() < deadline; ++attempt) {
      try {
        wire::Header request;
        request.type = MessageType::state_request;
        const transport::Message reply = transport.request(peer, request, {}, deadline);
        if (auto pulled = decode_state_reply(reply, peer, parameter_count)) return pulled;
        break;  // another shape: ask another peer
      } catch (const transport::PeerError& e) {
        if (e.peer_id() != peer) continue;
        logging::warn(std::string("no training state from '") + peer + "': " + e.what());
        break;
      }
    }
  }
  return std::nullopt;
}

std::vector<PulledState> pull_states(transport::Transport& transport, std::span<const std::string> peers,
                                     std::size_t parameter_count, Clock::duration timeout) {
  const auto deadline = Clock::now() + timeout;
  // Nonces of this call, from a counter that starts at random: answers to an earlier call
  // (late ones) or to another asker in this process are never taken for this one's.
  static std::atomic<std::uint64_t> next_nonce{(std::uint64_t{std::random_device{}()} << 32) |
                                               std::random_device{}()};
  const std::uint64_t base = next_nonce.fetch_add(peers.size() + 1);
  std::map<std::uint64_t, std::size_t> awaited;  // nonce -> index in peers
  // Peers the transport reported broken since its last call: a stored error surfaces on
  // whichever send comes next, and the transport reports a loss only once, so an error
  // about a peer asked later is remembered here, or that peer would cost the whole wait.
  std::set<std::string> broken;
  const auto ask = [&](std::size_t i) {
    wire::Header request;
    request.type = MessageType::state_request;
    request.nonce = base + i;
    for (int attempt = 0; attempt < 8 && !broken.contains(peers[i]); ++attempt) {
      try {
        transport.send(peers[i], request);
        awaited[request.nonce] = i;
        return;
      } catch (const transport::PeerError& e) {
        broken.insert(e.peer_id());
        if (e.peer_id() == peers[i])
          logging::warn(std::string("no training state from '") + peers[i] + "': " + e.what());
      }
    }
  };
  for (std::size_t i = 0; i < peers.size(); ++i)
    if (peers[i] != transport.id()) ask(i);
  std::erase_if(awaited, [&](const auto& entry) { return broken.contains(peers[entry.second]); });
  std::vector<std::optional<PulledState>> answers(peers.size());
  const auto forget = [&](const std::string& peer) {
    std::erase_if(awaited, [&](const auto& entry) { return peers[entry.second] == peer; });
  };
  while (!awaited.empty()) {
    std::optional<transport::Message> reply;
    try {
      // Every state_reply is taken: ours are kept, others' (late answers) dropped here.
      reply = transport.receive_control(
          deadline, [](const transport::Message& m) { return m.type() == MessageType::state_reply; });
    } catch (const transport::PeerError& e) {
      forget(e.peer_id());
      continue;
    }
    if (!reply) break;
    const auto it = awaited.find(reply->header().nonce);
    if (it == awaited.end() || peers[it->second] != reply->sender()) continue;
    const std::size_t i = it->second;
    awaited.erase(it);
    answers[i] = decode_state_reply(*reply, peers[i], parameter_count);
  }
  for (const auto& [nonce, i] : awaited)
    logging::warn("no training state from '" + peers[i] + "' within " +
                  std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count()) +
                  " ms");
  std::vector<PulledState> got;
  for (auto& a : answers)
    if (a) got.push_back(std::move(*a));
  return got;
}

}  // namespace hearsay
