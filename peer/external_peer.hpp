// A peer whose training is someone else's: the network node and the mixer host of a
// `hearsay peer` (peer_process.hpp) without its PeerTrainer. Another program (a PyTorch
// script through the Python module, python/) owns the model, the data and the optimizer;
// it hands this peer its parameters as one flat float32 buffer, calls after_step() after
// each optimizer step, and the algorithm of --algo mixes that buffer in place, exactly as
// it mixes a hearsay model's (HostParameterStore over the caller's memory: no copies).
//
//   ExternalPeer peer(parse_external_peer_settings({"--listen", "tcp://...", ...}));
//   peer.attach(data, count, fingerprint);   // bind, join, wait for the world, start mixing
//   for each step: train on data; peer.after_step(step);
//   peer.close();                            // flush the last round, stop, say bye
//
// Settings: the flags of `hearsay peer`, parsed by the same add_peer_options and checked
// by the same validate(), so that there is one declaration of every setting. CLI11 binds
// each option to its field only through the text of a command line (its validators and
// conversions run on text), so the caller's settings arrive as `--name=value` words; the
// Python module writes them from keyword arguments (python/hearsay/__init__.py). The
// training flags (--model, --epochs, ...) are accepted and ignored: the caller trains.
//
// What is not here (yet): the state pull of a late joiner (a gossip peer joining a run
// under way starts from its caller's parameters), checkpoints, the control file, metrics
// records. A model whose parameters differ from the run's (names, shapes) has another
// fingerprint: a joiner learns it at attach() (PeerStartError: the seed refused it); the
// first peer of the run learns nothing, its partners are refused.
//
// Errors: std::invalid_argument for bad settings (parse, validate); PeerStartError (a
// std::runtime_error) when the run cannot be joined; std::runtime_error for misuse (a
// second attach, a step before attach or after close) and the algorithm's failures.
// Threads: one caller thread; the network's and the mixer's threads are their own.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gossip/mixing/algorithms/registry.hpp"
#include "model/parameter_store.hpp"
#include "peer/mixer_host.hpp"
#include "peer/network_node.hpp"
#include "peer/peer_config.hpp"

namespace hearsay {

// `hearsay peer`'s flags (without the program or subcommand name) parsed by
// add_peer_options, with --config FILE read as the peer reads it, per-peer paths expanded
// and validate()d. std::invalid_argument with CLI11's or validate's message otherwise.
PeerConfig parse_external_peer_settings(const std::vector<std::string>& args);

class ExternalPeer {
 public:
  explicit ExternalPeer(PeerConfig cfg);
  // close()s, swallowing its errors.
  ~ExternalPeer();
  ExternalPeer(const ExternalPeer&) = delete;
  ExternalPeer& operator=(const ExternalPeer&) = delete;

  // Takes the caller's count floats at data (which must stay valid until close()) as this
  // peer's parameters; fingerprint names the model (peers of other fingerprints refuse
  // each other). Binds, joins the run, waits for the ranks (--world) or --min-peers, and
  // starts the mixer. Blocks: release the caller's locks. When it throws, the peer is
  // closed (its port freed): make a new one to try again.
  void attach(float* data, std::size_t count, const std::string& fingerprint);
  // After the caller's optimizer step `step` (counted from 1): the algorithm's hook
  // (MixerHost::after_update), which may change the buffer in place.
  void after_step(std::uint64_t step);
  // Mixes what is pending into the buffer, stops the mixer, says bye. A second call does
  // nothing.
  void close();

  const std::string& id() const noexcept { return id_; }
  bool attached() const noexcept { return store_.has_value(); }
  bool closed() const noexcept { return closed_.load(); }
  // Where other peers join this one (after attach), e.g. "tcp://host:29500".
  std::string address() const;
  // The live members of the run, this peer included (1 before attach).
  std::int64_t live_members() const;
  // What mixing did so far.
  MixerHost::Totals totals() const { return mixer_.totals(); }

 private:
  // attach()'s network part: bind, join, wait, start the mixer.
  void connect(const std::string& fingerprint);
  void check_usable(const char* what) const;
  StatusServer::Snapshot status();

  const PeerConfig cfg_;
  const algorithms::AlgorithmTraits* const traits_;  // null for --algo none
  const std::string id_;
  std::atomic<bool> stop_{false};
  std::optional<HostParameterStore> store_;  // the caller's buffer, from attach()
  std::atomic<std::uint64_t> last_step_{0};  // read by hs-state too
  std::atomic<bool> closed_{false};          // read by hs-http too
  // Built in this order, destroyed the other way round: the mixer uses the transport.
  std::unique_ptr<NetworkNode> network_;
  MixerHost mixer_;
};

}  // namespace hearsay
