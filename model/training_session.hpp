// One model training on one backend: its parameters, gradients and optimizer state on the
// device, its data uploaded once, and the three things a training loop does with them
// (a step's gradients, the optimizer update, an evaluation). The CPU session is the
// multi-threaded Trainer over host buffers; the CUDA session keeps everything on the GPU.
//
// The Model's host state (model.state()) is what checkpoints, the mixer and the state
// responder read and write. On the CPU they are the training buffers themselves; on a GPU
// they are a mirror: params_to_host() refreshes it (before a checkpoint, or a state sent to
// a neighbour), params_from_host() sends edits back (a resumed checkpoint, a pulled state).
// Mixing goes through parameters() and needs neither.
#pragma once
#include <cstdint>
#include <memory>
#include <span>

#include "model/backend.hpp"
#include "model/data/dataset.hpp"
#include "model/model.hpp"
#include "model/optim/optimizer.hpp"
#include "model/parameter_store.hpp"
#include "model/trainer.hpp"

namespace hearsay {

class TrainingSession {
 public:
  virtual ~TrainingSession() = default;
  virtual const Backend& backend() const = 0;
  Device device() const { return backend().device(); }

  // The examples steps draw from and the test set; uploaded to the device once. Both must
  // outlive the session (the CPU session reads them in place).
  virtual void bind_data(const Dataset& train, const Dataset& test) = 0;
  // Gradients of the mean loss over train[indices] into the session's gradient buffer.
  // indices: valid rows of the bound training set, at most the session's max batch.
  virtual BatchStats compute_gradients(std::span<const std::int64_t> indices) = 0;
  // One optimizer update with learning rate lr from the last computed gradients.
  virtual void apply_update(float lr) = 0;
  // Loss and accuracy of the current parameters on the bound test set.
  virtual BatchStats evaluate() = 0;

  // The training parameters as a mixer reaches them (parameter_store.hpp): in place on the
  // CPU; on a GPU through pinned staging buffers and a copy stream of its own, with the
  // mixing arithmetic on the device. Valid as long as the session.
  virtual ParameterStore& parameters() = 0;

  // The host mirror (see above). No-ops on the CPU.
  virtual void params_to_host() = 0;
  virtual void params_from_host() = 0;
  // The optimizer object's state() and steps_taken() (what checkpoints save) from and to
  // the device. No-ops on the CPU, where the optimizer works on its own state.
  virtual void optimizer_state_to_host() = 0;
  virtual void optimizer_state_from_host() = 0;
};

struct SessionOptions {
  int threads = 1;             // CPU compute threads
  std::int64_t max_batch = 1;  // the largest batch compute_gradients is given
  // Whether parameters() reaches the buffers (BatchNorm's running statistics) as well as
  // the parameters, so that a mixer averages them too (--bn-stats mix) or leaves them to
  // each peer (--bn-stats local). Checkpoints and state transfers carry them either way.
  bool mix_buffers = true;
};

// A session for `model` with `optimizer` (whose options and state it uses) on `device`.
// Throws std::invalid_argument naming the first layer the device's backend cannot run,
// and DeviceUnavailable for CUDA in a build without it. model and optimizer must outlive it.
std::unique_ptr<TrainingSession> make_training_session(const Device& device, Model& model,
                                                       Optimizer& optimizer, const SessionOptions& options);

}  // namespace hearsay
