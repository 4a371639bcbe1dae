// Checkpoints: a model's parameters plus what a resumed run needs, in one safetensors
// file (https://huggingface.co/docs/safetensors).
//
// Layout: 8-byte little-endian header length N, N bytes of JSON header (padded with
// spaces so the data starts 8-byte aligned), then the raw little-endian tensor data.
// The header maps each tensor name to {"dtype": "F32", "shape": [...], "data_offsets":
// [begin, end]} (offsets relative to the data start) and "__metadata__" to string pairs.
//
// Tensors: every parameter and buffer under its PyTorch nn.Sequential state_dict name
// ("0.weight", "0.bias", "3.bn1.running_mean", ...; see Model::named_params and
// named_buffers; BatchNorm's num_batches_tracked as I64), so
// safetensors.torch.load_file(path) gives a state_dict for the equivalent
// torch.nn.Sequential (bench/pytorch_resnet.py for resnet20); then "optimizer.state" (F32, 1-D) when the
// optimizer has state (pop that key, or pass strict=False, before load_state_dict). Scalars live in
// __metadata__ as strings under "hearsay.*" keys (format version, fingerprint, model, step, epoch: the epoch
// a resume goes on in, epoch_step, seed, rng_state, optimizer, optimizer_steps, and epochs_completed, written
// for readers and not read back), plus "format": "pt" as safetensors.torch.save_file writes it.
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

namespace hearsay {

inline constexpr const char* kCheckpointFileName = "checkpoint.safetensors";
// Bumped when a reader of the previous version could misread a newer file.
inline constexpr int kCheckpointFormatVersion = 1;
// Largest JSON header read_checkpoint accepts (the limit the safetensors library uses).
inline constexpr std::uint64_t kCheckpointMaxHeaderBytes = 100'000'000;

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
// fingerprint of another model, a reserved extra key).
void write_checkpoint(const std::filesystem::path& file, const Model& model, const TrainingState& state);

// Reads a checkpoint written for this model. Everything is validated first (header length
// within the file and kCheckpointMaxHeaderBytes, JSON, every parameter tensor present as F32
// with the model's shape, offsets in bounds and tiling the data without overlap or gap,
// metadata complete, fingerprint equal to model.fingerprint()); any problem throws
// std::runtime_error naming the file and what is wrong, and leaves the model untouched.
// Only then are the parameters and buffers copied into model.state().
TrainingState read_checkpoint(const std::filesystem::path& file, Model& model);

// Copies the optimizer's name, step count and state into state.
void save_optimizer_state(Optimizer& optimizer, TrainingState& state);
// Puts a checkpoint's optimizer state back; throws std::runtime_error when the
// checkpoint was written by another optimizer or its state has another size (say which).
void restore_optimizer_state(const TrainingState& state, Optimizer& optimizer);

}  // namespace hearsay
