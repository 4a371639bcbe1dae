// Checkpoints: a model's parameters plus what a resumed run needs, as safetensors files
// (https://huggingface.co/docs/safetensors; the container is model/safetensors.hpp).
//
// The model file holds every parameter and buffer under its PyTorch nn.Sequential
// state_dict name ("0.weight", "0.bias", "3.bn1.running_mean", ...; see
// Model::named_params and named_buffers; BatchNorm's num_batches_tracked as I64) and
// nothing else, so that `net.load_state_dict(safetensors.torch.load_file(path),
// strict=True)` takes it as it is (bench/pytorch_resnet.py has resnet20's module).
// Scalars live in __metadata__ as strings under "hearsay.*" keys (format version,
// fingerprint, model, step, epoch: the epoch a resume goes on in, epoch_step, seed,
// rng_state, optimizer, optimizer_steps, and epochs_completed, written for readers and not
// read back), plus "format": "pt" as safetensors.torch.save_file writes it.
//
// The optimizer state, when there is one, goes beside it in a file of its own,
// STEM.optimizer-STEP.safetensors (one 1-D F32 tensor "state", with the model's
// fingerprint and the step in its metadata), which the model file names under
// "hearsay.optimizer_file". It is written first and named by step, so a crash between
// the two writes leaves the previous pair whole; each write removes the older ones.
// Format 1 kept the optimizer state in the model file as "optimizer.state", which
// PyTorch's strict load refuses; such files are still read.
//
// A run keeps one checkpoint per directory under the fixed name kCheckpointFileName
// (checkpoint_path(dir)); every write replaces it atomically, so `--resume DIR` reads
// checkpoint_path(DIR) and never sees a half-written file.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "model/model.hpp"
#include "model/optim/optimizer.hpp"
#include "model/safetensors.hpp"

namespace hearsay {

inline constexpr const char* kCheckpointFileName = "checkpoint.safetensors";
// The lock a peer holds on its checkpoint directory while it runs (peer/peer_trainer.cpp),
// naming itself inside: one directory, one writer.
inline constexpr const char* kCheckpointLockFile = ".lock";
// Bumped when a reader of the previous version could misread a newer file (2: the optimizer
// state in a file of its own).
inline constexpr int kCheckpointFormatVersion = 2;
// Largest JSON header read_checkpoint accepts (the limit the safetensors library uses).
inline constexpr std::uint64_t kCheckpointMaxHeaderBytes = safetensors::kMaxHeaderBytes;

// The checkpoint file of a checkpoint directory: dir / kCheckpointFileName.
std::filesystem::path checkpoint_path(const std::filesystem::path& dir);

// Everything besides the parameters that an exact resume needs.
//
// The data order of `hearsay train` is a function of (seed, epoch): each epoch shuffles
// the shard order once more with an Rng seeded from the run seed, so a resume rebuilds it
// by replaying the shuffles of epochs 1..epoch and skipping epoch_step batches. Random
// sources that cannot be replayed that way (a gossip peer's neighbour choice, say) go
// into rng_state as the caller's own u64 words.
struct TrainingState {
  // Filled from the model by write_checkpoint (a non-empty value must match the model);
  // read_checkpoint returns the file's values, which then equal the model's.
  std::string fingerprint;
  std::string model;
  std::int64_t step = 0;        // optimizer steps of the whole run so far (the schedule's position)
  std::int64_t epoch = 1;       // the epoch in progress (1-based), or the next one to start
  std::int64_t epoch_step = 0;  // batches of `epoch` already trained: the sampler position
  std::uint64_t seed = 0;       // the run seed (initialisation, shuffles, partitions)
  std::vector<std::uint64_t> rng_state;
  std::string optimizer;               // Optimizer::name(), e.g. "sgd", "adamw"
  std::int64_t optimizer_steps = 0;    // Optimizer::steps_taken()
  std::vector<float> optimizer_state;  // Optimizer::state(), verbatim
  // Further string pairs a caller wants kept (peer id, gossip round, ...); keys must not
  // be "format" nor start with "hearsay.".
  std::map<std::string, std::string> extra;
};

// Writes the checkpoint crash-safely through AtomicFileWriter (base/atomic_file.hpp): a
// temporary file in the same directory, fsync, rename over file, fsync the directory. On any failure
// (directory missing or not writable, disk full, ...) throws std::runtime_error naming the path, removes the
// temporary file and leaves a previous checkpoint at `file` untouched. Throws
// std::invalid_argument for a state that cannot be written (negative counters, a
// fingerprint of another model, a reserved extra key). A state with optimizer_state writes
// the optimizer's file first (see above), and afterwards removes the earlier ones.
void write_checkpoint(const std::filesystem::path& file, const Model& model, const TrainingState& state);

// Reads a checkpoint written for this model. Everything is validated first (header length
// within the file and kCheckpointMaxHeaderBytes, JSON, every parameter tensor present as F32
// with the model's shape, offsets in bounds and tiling the data without overlap or gap,
// metadata complete, fingerprint equal to model.fingerprint()); any problem throws
// std::runtime_error naming the file and what is wrong, and leaves the model untouched.
// Only then are the parameters and buffers copied into model.state(). The optimizer file
// the checkpoint names is read into optimizer_state, and must be there, of the same model
// and step.
TrainingState read_checkpoint(const std::filesystem::path& file, Model& model);

// Copies the optimizer's name, step count and state into state.
void save_optimizer_state(Optimizer& optimizer, TrainingState& state);
// Puts a checkpoint's optimizer state back; throws std::runtime_error when the
// checkpoint was written by another optimizer or its state has another size (say which).
void restore_optimizer_state(const TrainingState& state, Optimizer& optimizer);

}  // namespace hearsay
