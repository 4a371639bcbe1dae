// A peer whose training is someone else's: the network node and the mixer host of a
// `hearsay peer` (peer_process.hpp) without its PeerTrainer. Another program (a PyTorch
// script through the Python module, python/) owns the model, the data and the optimizer;
// it hands this peer its parameters as one flat float32 buffer, calls after_step() after
// each optimizer step, and the algorithm of --algo mixes that buffer in place, exactly as
// it mixes a hearsay model's (HostParameterStore over the caller's memory: no copies).
//
//   ExternalPeer peer(parse_external_peer_settings({"--listen", "tcp://...", ...}));
//   peer.attach(data, {layout, shard_examples, train_examples});  // bind, join, wait, start mixing
//   for each step: train on data; if (!peer.after_step(step, loss)) break;
//   peer.close();                            // flush the last round, stop, say bye
//
// Settings: the flags of `hearsay peer`, parsed by the same add_peer_options and checked
// by the same validate(), so that there is one declaration of every setting. CLI11 binds
// each option to its field only through the text of a command line (its validators and
// conversions run on text), so the caller's settings arrive as `--name=value` words; the
// Python module writes them from keyword arguments (python/hearsay/__init__.py). The
// training flags (--model, --epochs, ...) are accepted and ignored: the caller trains.
//
// What it does as a `hearsay peer` does, so that `hearsay sim --peer-command`, the launcher
// and hearsay watch run it as one: the ready file once bound, the metrics records, the
// parameter snapshots and checkpoints (external_records.hpp), the control file (hold,
// stop, pause-at, slowdown, partitions, link), the run's budget and learning-rate
// schedule (run_budget.hpp: plan_run, from the caller's shard and training-set sizes),
// /metrics and /status, a late joiner's state pull served from the buffer, and its own pull
// when it joins a gossip run under way (its parameters and step; the caller's optimizer
// state is the caller's, in no checkpoint and no pull).
// A model whose parameters differ from the run's (names, shapes) has another fingerprint
// (model_layout.hpp): a joiner learns it at attach() (PeerStartError: the seed refused it);
// the first peer of the run learns nothing, its partners are refused.
//
// Errors: std::invalid_argument for bad settings (parse, validate); PeerStartError (a
// std::runtime_error) when the run cannot be joined; std::runtime_error for misuse (a
// second attach, a step before attach or after close) and the algorithm's failures.
// Threads: one caller thread; the network's and the mixer's threads are their own.
#pragma once
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gossip/mixing/algorithms/registry.hpp"
#include "gossip/network/emulation/control_file.hpp"
#include "model/parameter_store.hpp"
#include "peer/external_records.hpp"
#include "peer/mixer_host.hpp"
#include "peer/model_layout.hpp"
#include "peer/network_node.hpp"
#include "peer/peer_config.hpp"
#include "peer/run_budget.hpp"

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

  // What the caller's model is, for attach().
  struct CallerModel {
    ModelLayout layout;               // its tensors in the buffer's order (model_layout.hpp)
    std::int64_t shard_examples = 0;  // this peer's training examples (> 0)
    std::int64_t train_examples = 0;  // the whole training set's (>= shard_examples)
  };
  // Takes the caller's floats at data (layout_count(model.layout) of them, valid until
  // close()) as this peer's parameters: resumes them from --checkpoint with --resume,
  // binds, writes the ready file, joins the run, waits for the ranks (--world) or
  // --min-peers, starts the mixer and waits while the control file holds. Blocks: release
  // the caller's locks. When it throws, the peer is closed (its port freed).
  void attach(float* data, const CallerModel& model);
  // After the caller's optimizer step `step` (counted from 1; a resumed peer goes on from
  // start_step()+1) with its loss (none: not given; a loss that is not finite is a divergence): the
  // algorithm's hook, which may change the buffer in place, then snapshots, metrics, checkpoints and a
  // control file's pause. Returns whether to train on: false once the run's budget is spent (--epochs, a
  // global or time budget, the simulator's stop).
  bool after_step(std::uint64_t step, std::optional<double> loss = std::nullopt);
  // Asks the run to end, as SIGTERM asks a native peer: the next after_step() returns
  // false, and the waits of attach() (hold, pause) end. Any thread; async-signal-safe.
  void request_stop() noexcept { stop_.store(true); }
  // The learning rate of the step after `step` steps (--lr, --lr-schedule, the budget).
  double learning_rate(std::uint64_t step) const;
  // Mixes what is pending into the buffer, stops the mixer, writes the final checkpoint
  // and record, says bye. A second call does nothing.
  void close();

  std::int64_t steps_per_epoch() const noexcept { return plan_.steps_per_epoch; }
  std::int64_t start_step() const noexcept { return start_step_; }
  const std::string& fingerprint() const noexcept { return fingerprint_; }
  const PeerConfig& config() const noexcept { return cfg_; }
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
  void connect();
  void pull_state_if_late();
  // The control file (--control-file), on the watcher's thread; the training thread's waits.
  void apply_control(const emulation::PeerControl& control);
  void wait_for_release();
  void pause_if_asked(std::int64_t step);
  // --slowdown and --min-step-time: pads the step the caller took since the last one.
  void emulate_compute();
  void fill_counters(PeerMetrics& m);
  void check_usable(const char* what) const;
  StatusServer::Snapshot status();

  const PeerConfig cfg_;
  const algorithms::AlgorithmTraits* const traits_;  // null for --algo none
  const std::string id_;
  std::atomic<bool> stop_{false};
  std::span<float> buffer_;                  // the caller's, from attach()
  std::optional<HostParameterStore> store_;  // over buffer_
  std::vector<compress::TensorShape> tensors_;  // the caller's, as matrices (attach)
  std::atomic<std::uint64_t> last_step_{0};  // read by hs-state too
  std::atomic<bool> closed_{false};          // read by hs-http too
  std::string fingerprint_;
  RunPlan plan_;  // steps per epoch, budget, schedule, progress (attach)
  std::int64_t start_step_ = 0;
  std::optional<ExternalRecords> records_;
  // When the process started (metrics' time_s counts from there, as a native peer's do:
  // a script's imports and data loading come before its peer), else when this was made.
  std::chrono::steady_clock::time_point started_ = process_start(), last_step_end_{};
  static std::chrono::steady_clock::time_point process_start();
  std::atomic<double> slowdown_;
  // The control file's hold and pause-at, for the training thread's waits.
  std::mutex control_mutex_;
  std::condition_variable control_changed_;
  bool held_ = false;                     // guarded by control_mutex_
  std::optional<std::int64_t> pause_at_;  // guarded by control_mutex_
  // Built in this order, destroyed the other way round: the mixer uses the transport.
  std::unique_ptr<NetworkNode> network_;
  MixerHost mixer_;
  std::unique_ptr<emulation::ControlFileWatcher> control_;  // uses the transport
};

}  // namespace hearsay
