#include "peer/model_layout.hpp"

#include <cstdio>
#include <stdexcept>

#include "base/rng.hpp"
#include "model/zoo.hpp"

namespace hearsay {

std::int64_t layout_count(const ModelLayout& layout) {
  if (layout.empty()) throw std::invalid_argument("the model has no tensors");
  std::int64_t total = 0;
  for (const TensorLayout& t : layout) {
    if (t.name.empty()) throw std::invalid_argument("a tensor of the model has no name");
    std::int64_t n = 1;
    for (const std::int64_t d : t.shape) {
      if (d < 1) throw std::invalid_argument("tensor '" + t.name + "' has an empty dimension");
      n *= d;
    }
    total += n;
  }
  return total;
}

namespace {

bool same_tensors(const ModelLayout& layout, const Model& model) {
  std::vector<const NamedTensor*> tensors;
  for (const auto& t : model.named_params()) tensors.push_back(&t);
  for (const auto& t : model.named_buffers()) tensors.push_back(&t);
  if (tensors.size() != layout.size()) return false;
  for (std::size_t i = 0; i < layout.size(); ++i) {
    const NamedTensor& t = *tensors[i];
    if (t.is_count || t.name != layout[i].name ||
        static_cast<std::size_t>(t.shape.rank()) != layout[i].shape.size())
      return false;
    for (std::size_t d = 0; d < layout[i].shape.size(); ++d)
      if (t.shape[static_cast<int>(d)] != layout[i].shape[d]) return false;
  }
  return true;
}

}  // namespace

ModelIdentity identify_model(const ModelLayout& layout) {
  const std::int64_t count = layout_count(layout);
  for (const auto& entry : registered_models()) {
    auto model = entry.make(true);
    if (model->state_count() == count && same_tensors(layout, *model)) {
      std::string fingerprint = model->fingerprint();
      return {std::move(model), std::move(fingerprint)};
    }
  }
  std::string text;
  for (const TensorLayout& t : layout) {
    text += t.name + ":";
    for (const std::int64_t d : t.shape) text += std::to_string(d) + ",";
    text += ";";
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(stable_hash(text)));
  return {nullptr, "torch-" + std::to_string(count) + "-" + hex};
}

std::string layout_fingerprint(const ModelLayout& layout) { return identify_model(layout).fingerprint; }

}  // namespace hearsay
