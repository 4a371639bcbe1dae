#include "peer/layout_checkpoint.hpp"

#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "base/atomic_file.hpp"
#include "model/checkpoint.hpp"
#include "model/safetensors.hpp"

namespace hearsay {

void write_layout_checkpoint(const std::filesystem::path& file, const ModelLayout& layout,
                             std::span<const float> params, const LayoutCheckpointState& state) {
  if (static_cast<std::int64_t>(params.size()) != layout_count(layout))
    throw std::invalid_argument("checkpoint: " + std::to_string(params.size()) + " values for a model of " +
                                std::to_string(layout_count(layout)));
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"},
                            {"hearsay.format_version", std::to_string(kCheckpointFormatVersion)},
                            {"hearsay.fingerprint", state.fingerprint},
                            {"hearsay.step", std::to_string(state.step)},
                            {"hearsay.seed", std::to_string(state.seed)},
                            {"hearsay.peer", state.peer},
                            {"hearsay.run", state.run},
                            {"hearsay.algo", state.algo}};
  std::uint64_t offset = 0;
  for (const TensorLayout& t : layout) {
    std::uint64_t n = 1;
    for (const std::int64_t d : t.shape) n *= static_cast<std::uint64_t>(d);
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + 4 * n}}};
    offset += 4 * n;
  }
  const std::string text = safetensors::padded_header(header);
  std::string content = safetensors::length_prefix(text.size()) + text;
  content.append(reinterpret_cast<const char*>(params.data()), params.size_bytes());  // little-endian hosts
  write_file_atomically(file, content);
}

namespace {

LayoutCheckpointState state_of(safetensors::Reader& reader, const safetensors::Layout& layout) {
  LayoutCheckpointState s;
  s.fingerprint = reader.value(layout, "hearsay.fingerprint");
  s.step = reader.integer<std::int64_t>(layout, "hearsay.step");
  s.seed = reader.integer<std::uint64_t>(layout, "hearsay.seed");
  s.peer = reader.value(layout, "hearsay.peer");
  s.run = reader.value(layout, "hearsay.run");
  s.algo = reader.value(layout, "hearsay.algo");
  return s;
}

}  // namespace

LayoutCheckpointState read_layout_checkpoint(const std::filesystem::path& file, const ModelLayout& layout,
                                             const std::string& fingerprint, std::span<float> params) {
  safetensors::Reader reader(file, "checkpoint");
  const safetensors::Layout found = reader.layout();
  const LayoutCheckpointState state = state_of(reader, found);
  if (state.fingerprint != fingerprint)
    throw reader.error("it holds a model of fingerprint " + state.fingerprint + ", this peer's is " +
                       fingerprint);
  if (static_cast<std::int64_t>(params.size()) != layout_count(layout))
    throw std::invalid_argument("checkpoint: a buffer of " + std::to_string(params.size()) +
                                " for a model of " + std::to_string(layout_count(layout)));
  std::vector<float> values(params.size());
  std::size_t at = 0;
  for (const TensorLayout& t : layout) {
    const auto it = found.tensors.find(t.name);
    if (it == found.tensors.end()) throw reader.error("no tensor '" + t.name + "'");
    const safetensors::Entry& e = it->second;
    if (e.dtype != "F32" || e.shape != t.shape)
      throw reader.error("tensor '" + t.name + "' is " + e.dtype + " " + safetensors::shape_text(e.shape) +
                         ", the model's is F32 " + safetensors::shape_text(t.shape));
    const auto bytes = reader.read(found.data_offset + e.begin, e.end - e.begin);
    std::memcpy(values.data() + at, bytes.data(), bytes.size());
    at += bytes.size() / sizeof(float);
  }
  std::copy(values.begin(), values.end(), params.begin());
  return state;
}

std::vector<float> read_layout_checkpoint_state(const std::filesystem::path& file) {
  safetensors::Reader reader(file, "checkpoint");
  const safetensors::Layout found = reader.layout();
  state_of(reader, found);  // one of ours, whole
  for (const auto& [name, e] : found.tensors)
    if (e.dtype != "F32") throw reader.error("tensor '" + name + "' is " + e.dtype + ", not F32");
  const auto bytes = reader.read(found.data_offset, found.data_bytes);
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

}  // namespace hearsay
