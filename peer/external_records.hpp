// What an external peer (external_peer.hpp) writes, as a `hearsay peer` writes it, so that
// whoever watches native peers (`hearsay sim`, the launcher, hearsay watch, a user's
// plotting script) watches a PyTorch peer the same way:
//   --metrics FILE      the "start", "ready", "paused", interval ("metrics") and "final"
//                       records of peer_trainer.cpp, with the step, epoch, the caller's
//                       mean loss over the interval (null when it gave none), samples/s
//                       and the mixing counters;
//   --snapshot-every E  DIR/params-K.f32 right after step round(K x E x steps per epoch)
//                       (run_output.hpp: snapshot_due), the flat buffer as it is;
//   --checkpoint DIR    the checkpoint every --checkpoint-every and at the end, and
//                       --resume from it: for a model that is a zoo model (model_layout.hpp)
//                       the native checkpoint (model/checkpoint.hpp), which `hearsay sim`
//                       and native peers read; for any other, the same file of its own
//                       tensors (layout_checkpoint.hpp). The caller's optimizer state is
//                       not in it (PyTorch holds it): a resumed peer starts its momentum
//                       afresh.
//
// Threads: the caller's training thread, but latest() (any thread).
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>

#include "model/model.hpp"
#include "peer/metrics.hpp"
#include "peer/model_layout.hpp"
#include "peer/peer_config.hpp"
#include "peer/run_output.hpp"

namespace hearsay {

class ExternalRecords {
 public:
  using Clock = std::chrono::steady_clock;

  // Opens (and locks) the metrics file: std::runtime_error naming it when it cannot.
  // layout: the caller's model, identity what it is (model_layout.hpp). started: the
  // process's start.
  ExternalRecords(const PeerConfig& cfg, std::string id, ModelLayout layout, ModelIdentity identity,
                  Clock::time_point started);

  // --resume: the checkpoint's parameters into params; its step, or nullopt without one
  // (none written yet). PeerStartError for a checkpoint
  // of another peer or --seed; std::runtime_error for one that does not load.
  std::optional<std::int64_t> resume(std::span<float> params);

  void write(nlohmann::json record);
  void start_record(const std::string& fingerprint, std::int64_t params, std::int64_t shard,
                    std::int64_t steps_per_epoch, std::int64_t start_step);
  // After each step: the caller's loss (none when not given) and the counters of the
  // interval's record (filled by `counters`) when --log-every has passed (or force).
  void after_step(std::int64_t step, std::optional<double> loss,
                  const std::function<void(PeerMetrics&)>& counters, bool force = false);
  // params-K.f32 when one is due after `step`; flush first mixes what is pending in.
  void snapshot_if_due(std::int64_t step, std::int64_t steps_per_epoch, std::span<const float> params,
                       const std::function<void()>& flush);
  // The checkpoint when --checkpoint-every has passed (or always, when final); flush
  // first mixes what is pending in, only then (null: nothing to flush).
  void checkpoint_if_due(std::int64_t step, std::int64_t steps_per_epoch, std::span<const float> params,
                         bool final, const std::function<void()>& flush = nullptr);
  void final_record(std::int64_t step, std::int64_t steps_per_epoch, const std::string& ended_by, double lr);
  double seconds_since_start() const { return seconds(Clock::now() - started_); }
  // The last interval's metrics, for /metrics and /status (any thread).
  PeerMetrics latest() const;

 private:
  const PeerConfig& cfg_;
  const std::string id_;
  const ModelLayout layout_;
  const std::string fingerprint_;
  const std::unique_ptr<Model> zoo_;
  const Clock::time_point started_;
  JsonLinesFile metrics_;
  mutable std::mutex latest_mutex_;
  PeerMetrics latest_;  // guarded by latest_mutex_
  // The interval since the last record.
  Clock::time_point interval_start_ = Clock::now();
  std::int64_t interval_steps_ = 0, interval_losses_ = 0;
  double interval_loss_sum_ = 0;
  bool first_ = true;
  Clock::time_point next_checkpoint_;
  std::int64_t next_snapshot_ = 1;
  std::int64_t steps_per_epoch_ = 0;  // from start_record
  std::uint64_t checkpoints_written_ = 0, checkpoint_failures_ = 0;
};

}  // namespace hearsay
