// The shape of a model that another program defines (a torch.nn.Module handed to
// hearsay.torch.attach): its tensors in the order of the flat buffer hearsay mixes, each
// with its state_dict name and shape. hearsay needs it for three things: the model's
// fingerprint (peers of other fingerprints refuse each other), the checkpoint's tensor
// names, and recognising a module that is one of hearsay's own models.
//
// A module whose tensors are exactly those of a zoo model (model/zoo.hpp: the same names,
// shapes and order, as bench/pytorch_lenet.py's LeNet has --model lenet's) IS that model to
// the run: it takes the zoo model's fingerprint, so it mixes with native peers of that
// model, its checkpoints are the native ones, and `hearsay sim` evaluates it natively.
// Any other module is "torch-COUNT-HASH" over its names and shapes.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/model.hpp"

namespace hearsay {

struct TensorLayout {
  std::string name;
  std::vector<std::int64_t> shape;
};
using ModelLayout = std::vector<TensorLayout>;

// The floats of all tensors. std::invalid_argument for an empty layout, a tensor without a
// name or with a dimension < 1.
std::int64_t layout_count(const ModelLayout& layout);
// What the run knows a caller's model by (see above), worked out once: the zoo model
// whose parameters and buffers are exactly `layout` (null when none is), and the
// fingerprint, that zoo model's or "torch-COUNT-HASH".
struct ModelIdentity {
  std::unique_ptr<Model> zoo;
  std::string fingerprint;
};
ModelIdentity identify_model(const ModelLayout& layout);
// identify_model(layout).fingerprint.
std::string layout_fingerprint(const ModelLayout& layout);

}  // namespace hearsay
