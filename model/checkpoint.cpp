#include "model/checkpoint.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "base/atomic_file.hpp"
#include "model/safetensors.hpp"

namespace hearsay {

// The data section is the state's floats verbatim (and counters as int64); safetensors is
// little-endian.
static_assert(std::endian::native == std::endian::little, "checkpoints assume a little-endian host");

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// Format 1 kept the optimizer state in the checkpoint itself, as this tensor, which made
// the file fail PyTorch's strict load; it is still read.
constexpr const char* kOptimizerTensorV1 = "optimizer.state";
constexpr const char* kOptimizerTensor = "state";  // the one tensor of an optimizer file
constexpr const char* kKeyOptimizerFile = "hearsay.optimizer_file";
constexpr const char* kKeyVersion = "hearsay.format_version";
constexpr const char* kKeyFingerprint = "hearsay.fingerprint";
constexpr const char* kKeyModel = "hearsay.model";
constexpr const char* kKeyStep = "hearsay.step";
constexpr const char* kKeyEpoch = "hearsay.epoch";
constexpr const char* kKeyEpochStep = "hearsay.epoch_step";
constexpr const char* kKeySeed = "hearsay.seed";
constexpr const char* kKeyRng = "hearsay.rng_state";
constexpr const char* kKeyOptimizer = "hearsay.optimizer";
constexpr const char* kKeyOptimizerSteps = "hearsay.optimizer_steps";

bool is_reserved_key(const std::string& key) { return key == "format" || key.rfind("hearsay.", 0) == 0; }

std::string quoted(const fs::path& p) { return "'" + p.string() + "'"; }

// ---------------------------------------------------------------------------- writing

std::string join_u64(const std::vector<std::uint64_t>& words) {
  std::string s;
  for (auto w : words) s += (s.empty() ? "" : ",") + std::to_string(w);
  return s;
}

// Where each state tensor goes in the data section: the parameters and F32 buffers first,
// in state order (their bytes are the state's bytes), then the counters as int64.
struct DataEntry {
  const NamedTensor* tensor;
  std::uint64_t begin;
  std::uint64_t bytes() const {
    return static_cast<std::uint64_t>(tensor->shape.numel()) * (tensor->is_count ? 8 : 4);
  }
};

std::vector<DataEntry> data_layout(const Model& model) {
  std::vector<DataEntry> entries;
  std::uint64_t at = 0;
  auto add = [&](const NamedTensor& t) {
    entries.push_back({&t, at});
    at += entries.back().bytes();
  };
  for (const auto& t : model.named_params()) add(t);
  for (const auto& t : model.named_buffers())
    if (!t.is_count) add(t);
  for (const auto& t : model.named_buffers())
    if (t.is_count) add(t);
  return entries;
}

// The metadata both files of a checkpoint carry: which model, which step, which optimizer.
nlohmann::ordered_json common_metadata(const Model& model, const TrainingState& state) {
  nlohmann::ordered_json meta;
  meta["format"] = "pt";
  meta[kKeyVersion] = std::to_string(kCheckpointFormatVersion);
  meta[kKeyFingerprint] = model.fingerprint();
  meta[kKeyModel] = model.name();
  meta[kKeyStep] = std::to_string(state.step);
  meta[kKeyOptimizer] = state.optimizer;
  meta[kKeyOptimizerSteps] = std::to_string(state.optimizer_steps);
  return meta;
}

// The model file's header: the state's tensors and the run's position; the optimizer
// state's file by name when there is one.
std::string make_header(const Model& model, const TrainingState& state, const std::string& optimizer_file) {
  nlohmann::ordered_json header;
  nlohmann::ordered_json meta = common_metadata(model, state);
  meta[kKeyEpoch] = std::to_string(state.epoch);
  meta[kKeyEpochStep] = std::to_string(state.epoch_step);
  // For people reading the metadata: "epoch" is where a resume goes on (a finished 1-epoch
  // run says 2), this is how many epochs are done.
  meta["hearsay.epochs_completed"] = std::to_string(std::max<std::int64_t>(state.epoch - 1, 0));
  meta[kKeySeed] = std::to_string(state.seed);
  meta[kKeyRng] = join_u64(state.rng_state);
  if (!optimizer_file.empty()) meta[kKeyOptimizerFile] = optimizer_file;
  for (const auto& [key, value] : state.extra) meta[key] = value;
  header["__metadata__"] = std::move(meta);
  for (const auto& e : data_layout(model)) {
    std::vector<std::int64_t> dims;
    for (int d = 0; d < e.tensor->shape.rank(); ++d) dims.push_back(e.tensor->shape[d]);
    header[e.tensor->name] = {{"dtype", e.tensor->is_count ? "I64" : "F32"},
                              {"shape", dims},
                              {"data_offsets", {e.begin, e.begin + e.bytes()}}};
  }
  return safetensors::padded_header(header);
}

// The optimizer state of step `state.step`, as one F32 tensor in a file of its own.
void write_optimizer_file(const fs::path& checkpoint, const fs::path& file, const Model& model,
                          const TrainingState& state) {
  nlohmann::ordered_json header;
  header["__metadata__"] = common_metadata(model, state);
  const std::uint64_t bytes = state.optimizer_state.size() * sizeof(float);
  header[kOptimizerTensor] = {{"dtype", "F32"},
                              {"shape", nlohmann::ordered_json::array({state.optimizer_state.size()})},
                              {"data_offsets", {0, bytes}}};
  const std::string text = safetensors::padded_header(header);
  try {
    AtomicFileWriter out(file);
    out.write(safetensors::length_prefix(text.size()));
    out.write(text);
    out.write(state.optimizer_state.data(), bytes);
    out.commit();
  } catch (const AtomicFileError& e) {
    throw std::runtime_error("cannot write checkpoint " + quoted(checkpoint) + ": its optimizer state " +
                             quoted(file) + ": " + e.what() + " (a previous checkpoint there is unchanged)");
  }
}

fs::path directory_of(const fs::path& file) { return file.has_parent_path() ? file.parent_path() : fs::path("."); }

// "checkpoint.optimizer-120.safetensors" beside checkpoint.safetensors at step 120: named
// by step, so that a crash between the two writes leaves the previous checkpoint's file.
std::string optimizer_file_name(const fs::path& checkpoint, std::int64_t step) {
  return checkpoint.stem().string() + ".optimizer-" + std::to_string(step) + ".safetensors";
}

bool is_optimizer_file_of(const fs::path& checkpoint, const std::string& name) {
  const std::string prefix = checkpoint.stem().string() + ".optimizer-";
  const std::string suffix = ".safetensors";
  if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return false;
  const std::string step = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  return std::all_of(step.begin(), step.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The optimizer files of earlier checkpoints (and of a write a crash cut short).
void remove_other_optimizer_files(const fs::path& checkpoint, const std::string& keep) {
  std::error_code ec;
  for (fs::directory_iterator it(directory_of(checkpoint), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name != keep && is_optimizer_file_of(checkpoint, name)) {
      std::error_code ignored;
      fs::remove(it->path(), ignored);
    }
  }
}

void check_writable_state(const Model& model, const TrainingState& state) {
  if (!state.fingerprint.empty() && state.fingerprint != model.fingerprint())
    throw std::invalid_argument("write_checkpoint: the state is for model " + state.fingerprint +
                                ", the model is " + model.fingerprint());
  if (state.step < 0 || state.epoch < 0 || state.epoch_step < 0 || state.optimizer_steps < 0)
    throw std::invalid_argument("write_checkpoint: step, epoch, epoch_step and optimizer_steps must be >= 0");
  for (const auto& [key, value] : state.extra)
    if (is_reserved_key(key))
      throw std::invalid_argument("write_checkpoint: extra metadata key '" + key +
                                  "' is reserved (\"format\" and \"hearsay.*\" are the checkpoint's own)");
}


// ---------------------------------------------------------------------------- reading

// Metadata: format version, then which model wrote it, then where the run was.
TrainingState read_metadata(const safetensors::Reader& r, const safetensors::Layout& layout, const Model& model) {
  const std::string version = r.value(layout, kKeyVersion);
  if (version != "1" && version != std::to_string(kCheckpointFormatVersion))
    throw r.error("format version " + version + ", this build reads versions 1 to " +
                  std::to_string(kCheckpointFormatVersion));
  TrainingState state;
  state.fingerprint = r.value(layout, kKeyFingerprint);
  state.model = r.value(layout, kKeyModel);
  if (state.fingerprint != model.fingerprint())
    throw r.error("written for model " + state.fingerprint + " ('" + state.model + "'), not for this model " +
                  model.fingerprint() + " ('" + model.name() + "'): resume with the model it was written for");
  state.step = r.integer<std::int64_t>(layout, kKeyStep);
  state.epoch = r.integer<std::int64_t>(layout, kKeyEpoch);
  state.epoch_step = r.integer<std::int64_t>(layout, kKeyEpochStep);
  state.seed = r.integer<std::uint64_t>(layout, kKeySeed);
  const std::string words = r.value(layout, kKeyRng);
  for (std::size_t at = 0; !words.empty();) {
    const std::size_t comma = words.find(',', at);
    state.rng_state.push_back(r.parse_integer<std::uint64_t>(
        kKeyRng, words.substr(at, comma == std::string::npos ? std::string::npos : comma - at)));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  state.optimizer = r.value(layout, kKeyOptimizer);
  state.optimizer_steps = r.integer<std::int64_t>(layout, kKeyOptimizerSteps);
  for (const auto& [key, value] : layout.meta)
    if (!is_reserved_key(key)) state.extra[key] = value;
  return state;
}

std::vector<std::int64_t> dims_of(const Shape& shape) {
  std::vector<std::int64_t> dims;
  for (int d = 0; d < shape.rank(); ++d) dims.push_back(shape[d]);
  return dims;
}

// The optimizer tensor `name` of a file: 1-D F32, or an error.
const safetensors::Entry& optimizer_entry(const safetensors::Reader& r, const safetensors::Layout& layout,
                                          const char* name) {
  const auto& e = layout.tensors.at(name);
  if (e.dtype != "F32" || e.shape.size() != 1)
    throw r.error(std::string("tensor '") + name + "' must be 1-D F32, found " + e.dtype + " " +
                  safetensors::shape_text(e.shape));
  return e;
}

// Tensors: exactly the model's state (parameters and buffers, F32 or I64 for counters,
// the model's shapes), and in a format-1 file optionally the optimizer state, whose entry
// is returned (null when absent).
const safetensors::Entry* check_tensors(const safetensors::Reader& r, const safetensors::Layout& layout,
                                        const Model& model) {
  std::set<std::string> expected;
  std::vector<const NamedTensor*> state;
  for (const auto& t : model.named_params()) state.push_back(&t);
  for (const auto& t : model.named_buffers()) state.push_back(&t);
  for (const NamedTensor* tp : state) {
    const NamedTensor& t = *tp;
    expected.insert(t.name);
    const auto it = layout.tensors.find(t.name);
    if (it == layout.tensors.end()) throw r.error("missing tensor '" + t.name + "' of model " + model.fingerprint());
    const char* dtype = t.is_count ? "I64" : "F32";
    if (it->second.dtype != dtype)
      throw r.error("tensor '" + t.name + "' has dtype " + it->second.dtype + ", expected " + dtype);
    if (it->second.shape != dims_of(t.shape))
      throw r.error("tensor '" + t.name + "' has shape " + safetensors::shape_text(it->second.shape) +
                    ", the model's is " + t.shape.str());
  }
  const safetensors::Entry* optimizer = nullptr;
  if (layout.tensors.count(kOptimizerTensorV1) && layout.meta.at(kKeyVersion) == "1") {
    optimizer = &optimizer_entry(r, layout, kOptimizerTensorV1);
    expected.insert(kOptimizerTensorV1);
  }
  for (const auto& [name, entry] : layout.tensors)
    if (!expected.count(name))
      throw r.error("unexpected tensor '" + name + "': not a parameter of model " + model.fingerprint());
  return optimizer;
}

// The optimizer state a checkpoint names, checked to be of its model and step.
void read_optimizer_file(const fs::path& checkpoint, const std::string& name, const Model& model,
                         TrainingState& state) {
  if (!is_optimizer_file_of(checkpoint, name))
    throw std::runtime_error("checkpoint " + quoted(checkpoint) + ": its optimizer file '" + name +
                             "' is not a name it writes");
  const fs::path file = directory_of(checkpoint) / name;
  std::error_code ec;
  if (!fs::exists(file, ec))
    throw std::runtime_error("checkpoint " + quoted(checkpoint) + ": its optimizer state " + quoted(file) +
                             " is missing: copy it along with the checkpoint to resume");
  safetensors::Reader r(file, "optimizer state");
  const safetensors::Layout layout = r.layout();
  if (r.value(layout, kKeyFingerprint) != model.fingerprint() ||
      r.integer<std::int64_t>(layout, kKeyStep) != state.step || r.value(layout, kKeyOptimizer) != state.optimizer)
    throw r.error("written for " + r.value(layout, kKeyFingerprint) + " at step " + r.value(layout, kKeyStep) +
                  ", not for the checkpoint's " + model.fingerprint() + " at step " + std::to_string(state.step));
  if (layout.tensors.size() != 1 || !layout.tensors.count(kOptimizerTensor))
    throw r.error(std::string("holds ") + std::to_string(layout.tensors.size()) + " tensors, not the one '" +
                  kOptimizerTensor + "'");
  const auto& e = optimizer_entry(r, layout, kOptimizerTensor);
  const std::vector<char> data = r.read(layout.data_offset + e.begin, e.end - e.begin);
  state.optimizer_state.resize(static_cast<std::size_t>(e.shape[0]));
  std::memcpy(state.optimizer_state.data(), data.data(), data.size());
}

}  // namespace

fs::path checkpoint_path(const fs::path& dir) { return dir / kCheckpointFileName; }

void write_checkpoint(const fs::path& file, const Model& model, const TrainingState& state) {
  check_writable_state(model, state);
  // The optimizer's file first: the model file that names it replaces the previous one
  // only once both are complete.
  std::string optimizer_file;
  if (!state.optimizer_state.empty()) {
    optimizer_file = optimizer_file_name(file, state.step);
    write_optimizer_file(file, directory_of(file) / optimizer_file, model, state);
  }
  const std::string header = make_header(model, state, optimizer_file);
  // Each tensor goes out in data_layout's order, straight from the state: F32 tensors as
  // their bytes, counters converted to int64.
  const auto values = model.state();
  try {
    AtomicFileWriter out(file);
    out.write(safetensors::length_prefix(header.size()));
    out.write(header);
    for (const auto& e : data_layout(model)) {
      const float* first = values.data() + e.tensor->offset;
      const auto n = static_cast<std::size_t>(e.tensor->shape.numel());
      if (!e.tensor->is_count) {
        out.write(first, n * sizeof(float));
        continue;
      }
      for (std::size_t i = 0; i < n; ++i) {
        const auto count = static_cast<std::int64_t>(first[i]);
        out.write(&count, sizeof count);
      }
    }
    out.commit();
  } catch (const AtomicFileError& e) {
    throw std::runtime_error("cannot write checkpoint " + quoted(file) + ": " + e.what() +
                             (e.in_place() ? "" : " (a previous checkpoint there is unchanged)"));
  }
  remove_other_optimizer_files(file, optimizer_file);
}

TrainingState read_checkpoint(const fs::path& file, Model& model) {
  safetensors::Reader r(file, "checkpoint");
  const safetensors::Layout layout = r.layout();
  TrainingState state = read_metadata(r, layout, model);
  const safetensors::Entry* optimizer_v1 = check_tensors(r, layout, model);
  if (const auto it = layout.meta.find(kKeyOptimizerFile); it != layout.meta.end()) {
    try {
      read_optimizer_file(file, it->second, model, state);
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      if (what.rfind("checkpoint '", 0) == 0) throw;
      throw std::runtime_error("checkpoint " + quoted(file) + ": " + what);
    }
  }

  // The data, read whole before anything is copied, so a short read leaves the model as it was.
  const std::vector<char> data = r.read(layout.data_offset, layout.data_bytes);
  if (optimizer_v1) {
    state.optimizer_state.resize(static_cast<std::size_t>(optimizer_v1->shape[0]));
    std::memcpy(state.optimizer_state.data(), data.data() + optimizer_v1->begin,
                optimizer_v1->end - optimizer_v1->begin);
  }
  float* values = model.state().data();
  for (const auto& t : model.named_params()) {
    const auto& e = layout.tensors.at(t.name);
    std::memcpy(values + t.offset, data.data() + e.begin, e.end - e.begin);
  }
  for (const auto& t : model.named_buffers()) {
    const auto& e = layout.tensors.at(t.name);
    if (!t.is_count) {
      std::memcpy(values + t.offset, data.data() + e.begin, e.end - e.begin);
      continue;
    }
    for (std::int64_t i = 0; i < t.shape.numel(); ++i) {
      std::int64_t v;
      std::memcpy(&v, data.data() + e.begin + static_cast<std::uint64_t>(i) * 8, 8);
      values[t.offset + i] = static_cast<float>(v);
    }
  }
  return state;
}

void save_optimizer_state(Optimizer& optimizer, TrainingState& state) {
  state.optimizer = optimizer.name();
  state.optimizer_steps = optimizer.steps_taken();
  const auto s = optimizer.state();
  state.optimizer_state.assign(s.begin(), s.end());
}

void restore_optimizer_state(const TrainingState& state, Optimizer& optimizer) {
  if (state.optimizer != optimizer.name())
    throw std::runtime_error("the checkpoint's optimizer is '" + state.optimizer + "', this run uses '" +
                             optimizer.name() + "': resume with the same --optimizer options");
  const auto s = optimizer.state();
  if (state.optimizer_state.size() != s.size())
    throw std::runtime_error("the checkpoint's optimizer state has " +
                             std::to_string(state.optimizer_state.size()) + " floats, optimizer '" +
                             optimizer.name() + "' needs " + std::to_string(s.size()));
  std::copy(state.optimizer_state.begin(), state.optimizer_state.end(), s.begin());
  optimizer.set_steps_taken(state.optimizer_steps);
}

}  // namespace hearsay
