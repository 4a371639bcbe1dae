// The checkpoint of a model hearsay does not know (model_layout.hpp): a PyTorch script's
// module that is none of the zoo's. A safetensors file, as model/checkpoint.hpp writes a
// zoo model's, holding every tensor under its state_dict name and shape (F32), in the
// order of the flat buffer (the data section is that buffer, whole), and hearsay's state
// as strings in __metadata__: "format": "pt", hearsay.format_version, hearsay.fingerprint,
// hearsay.step, hearsay.seed, hearsay.peer, hearsay.run, hearsay.algo. So
// `model.load_state_dict(safetensors.torch.load_file(path))` takes it, and so does
// --resume. The optimizer's state is the script's (PyTorch holds it) and is not in it.
// Written atomically (a reader never sees half a file).
#pragma once
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "peer/model_layout.hpp"

namespace hearsay {

struct LayoutCheckpointState {
  std::string fingerprint, peer, run, algo;
  std::int64_t step = 0;
  std::uint64_t seed = 0;
};

// std::invalid_argument when params is not the layout's size; std::runtime_error naming
// the file when it cannot be written (a previous file stays).
void write_layout_checkpoint(const std::filesystem::path& file, const ModelLayout& layout,
                             std::span<const float> params, const LayoutCheckpointState& state);

// Reads a checkpoint of `layout` (whose fingerprint is `fingerprint`) into params: every
// tensor of the layout present, F32, of its shape, and the fingerprint the same.
// std::runtime_error naming the file and what is wrong otherwise; params untouched then.
LayoutCheckpointState read_layout_checkpoint(const std::filesystem::path& file, const ModelLayout& layout,
                                             const std::string& fingerprint, std::span<float> params);

// The whole flat state of such a checkpoint (its data section, every tensor F32), checked
// whole, for a reader that knows only the count (`hearsay sim`). std::runtime_error naming
// the file otherwise.
std::vector<float> read_layout_checkpoint_state(const std::filesystem::path& file);

}  // namespace hearsay
