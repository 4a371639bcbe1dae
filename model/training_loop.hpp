// The one training loop of hearsay, for every device and for both `hearsay train` and
// `hearsay peer`: every epoch, every batch of the epoch's order, take a step (gradients,
// then the optimizer update at the schedule's rate), and let the caller report, mix,
// checkpoint or stop between steps. What differs between the two commands (progress
// lines, mixing, checkpoints, divergence) lives in their hooks, not in a second loop.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <vector>

#include "model/optim/schedule.hpp"
#include "model/training_session.hpp"

namespace hearsay {

// Where a run is: epochs count from 1; epoch_step is the next step's index within the
// epoch (a resumed run starts mid-epoch); step counts every step taken.
struct TrainingPosition {
  std::int64_t epoch = 1;
  std::int64_t epoch_step = 0;
  std::int64_t step = 0;
};

struct StepReport {
  const TrainingPosition& position;  // after the step
  const BatchStats& stats;           // of this step's batch
  std::int64_t epoch_examples;       // examples in this epoch's order
};

struct EpochReport {
  std::int64_t epoch;
  bool complete;  // false when a stop came mid-epoch
  double train_seconds;
  BatchStats train;  // the steps this run took in the epoch
};

struct TrainingHooks {
  // The examples of epoch e, in the order to train them (indices into the bound train set).
  std::function<const std::vector<std::int64_t>&(std::int64_t epoch)> epoch_order;
  // Asked before every step; true ends the loop (the epoch is reported as incomplete).
  std::function<bool()> should_stop = [] { return false; };
  // After the gradients, before the update, with the time they took (the batch's gather
  // included): emulated compute time, loss checks (may throw).
  std::function<void(const BatchStats&, std::chrono::nanoseconds)> after_gradients =
      [](const BatchStats&, std::chrono::nanoseconds) {};
  // Held around the update and after_update: a peer's state lock, so that the state it
  // serves to others is never half updated. Null: no lock.
  std::mutex* update_mutex = nullptr;
  // Right after the update, under update_mutex: mixing.
  std::function<void(const StepReport&)> after_update = [](const StepReport&) {};
  // After the step, outside the lock: progress, checkpoints, pauses.
  std::function<void(const StepReport&)> after_step = [](const StepReport&) {};
  // At the end of every epoch, complete or not.
  std::function<void(const EpochReport&)> after_epoch = [](const EpochReport&) {};
};

// Runs epochs position.epoch..epochs with batches of `batch` (the last of an epoch may be
// smaller), advancing `position` as it goes. Returns when the epochs are done or
// should_stop said so. Exceptions from the session or the hooks propagate.
void run_training(TrainingSession& session, const LrSchedule& schedule, std::int64_t epochs,
                  std::int64_t batch, TrainingPosition& position, const TrainingHooks& hooks);

}  // namespace hearsay
