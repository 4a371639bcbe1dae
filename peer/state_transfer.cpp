#include "peer/state_transfer.hpp"

#include "gossip/log.hpp"
#include "model/thread_name.hpp"

namespace hearsay {

namespace {

using namespace std::chrono_literals;
using transport::Clock;
using wire::MessageType;

bool is_state_request(const transport::Message& m) { return m.type() == MessageType::state_request; }

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
        const auto& parts = reply.header().parts;
        if (parts.size() < 2 || parts[0] != parameter_count || parts[0] + parts[1] != reply.count()) {
          logging::warn("'" + peer + "' answered the state request with a state of another shape (" +
                        std::to_string(reply.count()) + " values, expected " +
                        std::to_string(parameter_count) + " parameters first); asking another peer");
          break;
        }
        const std::vector<float> flat = reply.decode();
        PulledState pulled;
        pulled.from = peer;
        pulled.state.step = reply.header().step;
        const auto split = flat.begin() + static_cast<std::ptrdiff_t>(parts[0]);
        pulled.state.params.assign(flat.begin(), split);
        pulled.state.optimizer_state.assign(split, flat.end());
        return pulled;
      } catch (const transport::PeerError& e) {
        if (e.peer_id() != peer) continue;
        logging::warn(std::string("no training state from '") + peer + "': " + e.what());
        break;
      }
    }
  }
  return std::nullopt;
}

}  // namespace hearsay
