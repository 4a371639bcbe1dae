// The mixer host, one part of a peer (peer_process.hpp): it owns the Mixer and, in it,
// the algorithm of --algo, built once when the peer has joined and kept to the end. When
// members come or go it gives an algorithm that follows membership
// (AlgorithmTraits::follows_membership: gossip) the new peer set through the Mixer
// (Mixer::set_peers, applied on the mixer's thread between rounds); the others mix over
// the fixed ranks of --world and are told nothing. It reports what mixing did: exchange
// totals, rounds, and the partner distances of each interval.
//
// Threads. The training thread starts it, syncs through it (after_update, flush) and
// stops it; membership's thread tells it of changes (members_changed); the HTTP thread
// reads its totals. mutex_ guards the mixer's creation and the peer set last given
// against those two threads; the Mixer has its own lock between the training thread
// and hs-mixer.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "gossip/mixing/algorithms/algorithm.hpp"
#include "gossip/mixing/algorithms/mixer.hpp"
#include "gossip/mixing/algorithms/partner_timing.hpp"
#include "gossip/mixing/algorithms/registry.hpp"
#include "gossip/mixing/topology/topology.hpp"
#include "gossip/network/membership/membership.hpp"
#include "model/model.hpp"
#include "model/parameter_store.hpp"
#include "peer/model_layout.hpp"
#include "peer/peer_config.hpp"

namespace hearsay {

// Whose optimizer trains the peer: hearsay's (the peer process, the virtual engine), which
// leaves --momentum to the algorithm where algorithm_applies_momentum says so, or the
// caller's (a PyTorch peer), which keeps the momentum it was given.
enum class OptimizerOwner { hearsay, caller };

// The algorithm of --algo (`traits`) for the peer `id`, over `transport` and `peers`, as a
// peer builds it: the knobs of algorithm_options, a partner stream of its own for the
// random-partner algorithms (--seed mixed with its id), what it learns about partners in
// `memory`, and `graph` (which must outlive the algorithm) for the graph algorithms.
// `tensors`: the mixed buffer's tensors (mixed_tensors), for the compressors that follow
// them. `parameter_values`: how many of the buffer's numbers are parameters (0: all), the
// ones --momentum-kind quasi-global runs over. `hearsay sim --engine virtual` builds its
// peers' algorithms with it too. std::invalid_argument for quasi-global momentum with the
// caller's optimizer (its own momentum would run as well).
std::unique_ptr<algorithms::Algorithm> make_peer_algorithm(
    const PeerConfig& cfg, const algorithms::AlgorithmTraits& traits, const std::string& id,
    transport::Transport& transport, algorithms::PeerSet peers, const topology::Topology* graph,
    std::shared_ptr<algorithms::PartnerMemory> memory, double shard_share = 1.0,
    std::vector<compress::TensorShape> tensors = {}, OptimizerOwner optimizer = OptimizerOwner::hearsay,
    std::size_t parameter_values = 0);

// The tensors of a mixed buffer of n values, each as a matrix (its first dimension by the
// rest): the model's parameters, then its buffers when the buffer holds them too
// (--bn-stats mix). Empty when they do not tile n: the compressors then cut the buffer
// into pieces of their own.
std::vector<compress::TensorShape> mixed_tensors(const Model& model, std::size_t n);
// The same for a caller's model (a PyTorch module): its layout holds every mixed tensor.
std::vector<compress::TensorShape> mixed_tensors(const ModelLayout& layout, std::size_t n);

class MixerHost {
 public:
  struct Totals {
    algorithms::ExchangeLog::Totals exchanges;
    std::uint64_t rounds = 0;          // rounds finished
    std::uint64_t rounds_skipped = 0;  // round steps the algorithm declined
  };

  // traits: --algo's; null for --algo none, when the host never starts and every call
  // does nothing. id: this peer's.
  MixerHost(const PeerConfig& cfg, const algorithms::AlgorithmTraits* traits, std::string id,
            OptimizerOwner optimizer = OptimizerOwner::hearsay);
  ~MixerHost();  // stops the mixer; never throws
  MixerHost(const MixerHost&) = delete;
  MixerHost& operator=(const MixerHost&) = delete;

  // Builds the algorithm over the run's peers as `members` knows them now and starts its
  // Mixer, with rounds numbered from first_round and its working copy in the buffers of
  // `params` (a GPU's pinned memory); both must outlive this host. Nothing for --algo
  // none. Throws std::invalid_argument for settings the algorithm refuses.
  // shard_share: AlgorithmOptions::shard_share; tensors, parameter_values: make_peer_algorithm's.
  void start(transport::Transport& transport, const membership::Membership& members,
             std::uint64_t first_round, ParameterStore& params, double shard_share = 1.0,
             std::vector<compress::TensorShape> tensors = {}, std::size_t parameter_values = 0);
  // Training thread: whether a mixer was started and is not stopped.
  bool running() const noexcept { return mixer_ && !stopped_; }
  // Members came or went (any thread; membership's, usually): an algorithm that follows
  // membership mixes with the new set from its next round on.
  void members_changed(const membership::Membership& members);

  // Training thread. Each does nothing unless running().
  void training_resumes();                                        // Mixer::training_resumes
  void after_update(ParameterStore& params, std::uint64_t step);  // Mixer::after_step
  void flush(ParameterStore& params);                             // Mixer::flush
  // Stops the mixer's thread: it mixes and answers partners no more. Call after the last
  // flush; the totals stay.
  void stop() noexcept;
  // The partner distances of the exchanges since the last call.
  std::vector<double> drain_distances();

  // Any thread: what mixing did so far (zeros before start).
  Totals totals() const;

 private:
  // The peers the algorithm mixes with: every rank of --world for a ranked algorithm;
  // otherwise every member not dead, by id.
  algorithms::PeerSet peer_set(const membership::Membership& members) const;

  const PeerConfig& cfg_;
  const algorithms::AlgorithmTraits* const traits_;
  const std::string id_;
  const OptimizerOwner optimizer_;
  std::optional<topology::Topology> graph_;  // for the graph algorithms
  // What the algorithm learns about partners (round trips, who is left out).
  std::shared_ptr<algorithms::PartnerMemory> partner_memory_ = std::make_shared<algorithms::PartnerMemory>();
  bool stopped_ = false;  // training thread

  mutable std::mutex mutex_;                  // guards mixer_'s creation and peers_
  std::unique_ptr<algorithms::Mixer> mixer_;  // set once by start()
  std::vector<std::string> peers_;            // the ids of the set the algorithm was last given
};

}  // namespace hearsay
