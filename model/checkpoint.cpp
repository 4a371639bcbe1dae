#include "model/checkpoint.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <tuple>
#include <type_traits>

#include "base/atomic_file.hpp"

namespace hearsay {

// The data section is the state's floats verbatim (and counters as int64); safetensors is
// little-endian.
static_assert(std::endian::native == std::endian::little, "checkpoints assume a little-endian host");

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr const char* kOptimizerTensor = "optimizer.state";
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

std::uint64_t state_bytes(const std::vector<DataEntry>& layout) {
  return layout.empty() ? 0 : layout.back().begin + layout.back().bytes();
}

// The header JSON, padded with spaces so that 8 + its length is a multiple of 8.
std::string make_header(const Model& model, const TrainingState& state) {
  nlohmann::ordered_json header;
  nlohmann::ordered_json meta;
  meta["format"] = "pt";
  meta[kKeyVersion] = std::to_string(kCheckpointFormatVersion);
  meta[kKeyFingerprint] = model.fingerprint();
  meta[kKeyModel] = model.name();
  meta[kKeyStep] = std::to_string(state.step);
  meta[kKeyEpoch] = std::to_string(state.epoch);
  meta[kKeyEpochStep] = std::to_string(state.epoch_step);
  // For people reading the metadata: "epoch" is where a resume goes on (a finished 1-epoch
  // run says 2), this is how many epochs are done.
  meta["hearsay.epochs_completed"] = std::to_string(std::max<std::int64_t>(state.epoch - 1, 0));
  meta[kKeySeed] = std::to_string(state.seed);
  meta[kKeyRng] = join_u64(state.rng_state);
  meta[kKeyOptimizer] = state.optimizer;
  meta[kKeyOptimizerSteps] = std::to_string(state.optimizer_steps);
  for (const auto& [key, value] : state.extra) meta[key] = value;
  header["__metadata__"] = std::move(meta);

  const auto layout = data_layout(model);
  for (const auto& e : layout) {
    std::vector<std::int64_t> dims;
    for (int d = 0; d < e.tensor->shape.rank(); ++d) dims.push_back(e.tensor->shape[d]);
    header[e.tensor->name] = {{"dtype", e.tensor->is_count ? "I64" : "F32"},
                              {"shape", dims},
                              {"data_offsets", {e.begin, e.begin + e.bytes()}}};
  }
  if (!state.optimizer_state.empty()) {
    const std::uint64_t begin = state_bytes(layout);
    header[kOptimizerTensor] = {
        {"dtype", "F32"},
        {"shape", nlohmann::ordered_json::array({state.optimizer_state.size()})},
        {"data_offsets", {begin, begin + state.optimizer_state.size() * sizeof(float)}}};
  }
  std::string text = header.dump();
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');
  return text;
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

std::runtime_error bad_file(const fs::path& file, const std::string& what) {
  return std::runtime_error("checkpoint " + quoted(file) + ": " + what);
}

std::size_t dtype_bytes(const std::string& dtype) {
  static const std::map<std::string, std::size_t> sizes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},  {"I32", 4},     {"I16", 2},    {"I8", 1},
      {"U64", 8}, {"U32", 4}, {"U16", 2}, {"U8", 1},   {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  const auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

struct TensorEntry {
  std::string name, dtype;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;
};

std::string shape_text(const std::vector<std::int64_t>& dims) {
  std::string s = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  return s + "]";
}

std::vector<std::int64_t> dims_of(const Shape& shape) {
  std::vector<std::int64_t> dims;
  for (int d = 0; d < shape.rank(); ++d) dims.push_back(shape[d]);
  return dims;
}

TensorEntry parse_entry(const fs::path& file, const std::string& name, const Json& j,
                        std::uint64_t data_bytes) {
  const auto fail = [&](const std::string& what) { return bad_file(file, "tensor '" + name + "' " + what); };
  if (!j.is_object()) throw fail("is not a JSON object");
  TensorEntry e;
  e.name = name;
  const auto dtype = j.find("dtype");
  const auto shape = j.find("shape");
  const auto offsets = j.find("data_offsets");
  if (dtype == j.end() || !dtype->is_string()) throw fail("has no \"dtype\" string");
  if (shape == j.end() || !shape->is_array()) throw fail("has no \"shape\" array");
  if (offsets == j.end() || !offsets->is_array() || offsets->size() != 2 ||
      !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned())
    throw fail("has no \"data_offsets\" pair of non-negative integers");
  e.dtype = dtype->get<std::string>();
  const std::size_t element = dtype_bytes(e.dtype);
  if (element == 0) throw fail("has unknown dtype '" + e.dtype + "'");
  // Every size stays <= data_bytes, which fits the file, so these products cannot overflow.
  std::uint64_t bytes = element;
  for (const auto& d : *shape) {
    if (!d.is_number_unsigned()) throw fail("has a shape entry that is not a non-negative integer");
    const auto dim = d.get<std::uint64_t>();
    e.shape.push_back(
        static_cast<std::int64_t>(std::min<std::uint64_t>(dim, std::numeric_limits<std::int64_t>::max())));
    if (dim != 0 && bytes > data_bytes / dim)
      bytes = data_bytes + 1;  // too large either way
    else
      bytes *= dim;
  }
  e.begin = (*offsets)[0].get<std::uint64_t>();
  e.end = (*offsets)[1].get<std::uint64_t>();
  if (e.begin > e.end)
    throw fail("has data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
               "] that run backwards");
  if (e.end > data_bytes)
    throw fail("has data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
               "] beyond the data section's " + std::to_string(data_bytes) + " bytes (truncated or corrupt)");
  if (e.end - e.begin != bytes)
    throw fail("spans " + std::to_string(e.end - e.begin) + " bytes, but " + e.dtype + " " +
               shape_text(e.shape) + " needs " + std::to_string(bytes));
  return e;
}

// The tensors must tile [0, data_bytes) exactly, as the safetensors format requires.
void check_tiling(const fs::path& file, std::vector<const TensorEntry*> entries, std::uint64_t data_bytes) {
  std::sort(entries.begin(), entries.end(), [](const TensorEntry* a, const TensorEntry* b) {
    return std::tie(a->begin, a->end) < std::tie(b->begin, b->end);
  });
  std::uint64_t at = 0;
  const TensorEntry* previous = nullptr;
  for (const auto* e : entries) {
    if (e->begin < at)
      throw bad_file(file,
                     "tensors '" + previous->name + "' and '" + e->name + "' overlap in the data section");
    if (e->begin > at)
      throw bad_file(file, "bytes [" + std::to_string(at) + ", " + std::to_string(e->begin) +
                               ") of the data section belong to no tensor");
    at = e->end;
    previous = e;
  }
  if (at != data_bytes)
    throw bad_file(file,
                   std::to_string(data_bytes - at) + " bytes after the last tensor belong to no tensor");
}

std::string metadata_value(const fs::path& file, const std::map<std::string, std::string>& meta,
                           const char* key) {
  const auto it = meta.find(key);
  if (it == meta.end())
    throw bad_file(file, std::string("metadata has no \"") + key + "\" (not a hearsay checkpoint?)");
  return it->second;
}

template <class Int>
Int parse_integer(const fs::path& file, const char* key, const std::string& text) {
  Int value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  bool negative = false;
  if constexpr (std::is_signed_v<Int>) negative = value < 0;
  if (ec != std::errc() || end != text.data() + text.size() || text.empty() || negative)
    throw bad_file(file,
                   std::string("metadata \"") + key + "\" is '" + text + "', not a non-negative integer");
  return value;
}

std::vector<std::uint64_t> parse_words(const fs::path& file, const std::string& text) {
  std::vector<std::uint64_t> words;
  if (text.empty()) return words;
  for (std::size_t at = 0;;) {
    const std::size_t comma = text.find(',', at);
    words.push_back(parse_integer<std::uint64_t>(
        file, kKeyRng, text.substr(at, comma == std::string::npos ? std::string::npos : comma - at)));
    if (comma == std::string::npos) return words;
    at = comma + 1;
  }
}

// Reads n bytes at offset; false when the file is shorter.
bool read_at(std::ifstream& in, std::uint64_t offset, char* out, std::uint64_t n) {
  in.seekg(static_cast<std::streamoff>(offset));
  in.read(out, static_cast<std::streamsize>(n));
  return static_cast<std::uint64_t>(in.gcount()) == n;
}

}  // namespace

fs::path checkpoint_path(const fs::path& dir) { return dir / kCheckpointFileName; }

void write_checkpoint(const fs::path& file, const Model& model, const TrainingState& state) {
  check_writable_state(model, state);
  const std::string header = make_header(model, state);
  const std::uint64_t length = header.size();
  char length_bytes[8];
  for (int i = 0; i < 8; ++i) length_bytes[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  // Each tensor goes out in data_layout's order, straight from the state: F32 tensors as
  // their bytes, counters converted to int64.
  const auto values = model.state();
  try {
    AtomicFileWriter out(file);
    out.write(length_bytes, sizeof length_bytes);
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
    out.write(state.optimizer_state.data(), state.optimizer_state.size() * sizeof(float));
    out.commit();
  } catch (const AtomicFileError& e) {
    throw std::runtime_error("cannot write checkpoint " + quoted(file) + ": " + e.what() +
                             (e.in_place() ? "" : " (a previous checkpoint there is unchanged)"));
  }
}

namespace {

// 1. The header length and the header, a JSON object without duplicate keys. Returns the
// header's length in bytes.
std::uint64_t read_header(std::ifstream& in, const fs::path& file, std::uint64_t file_size, Json& header) {
  if (file_size < 8)
    throw bad_file(file, "truncated: " + std::to_string(file_size) +
                             " bytes, fewer than the 8-byte header length of a safetensors file");
  unsigned char length_bytes[8];
  if (!read_at(in, 0, reinterpret_cast<char*>(length_bytes), 8))
    throw bad_file(file, "cannot read the header length");
  std::uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | length_bytes[i];
  if (header_bytes > kCheckpointMaxHeaderBytes)
    throw bad_file(file, "header length " + std::to_string(header_bytes) + " exceeds the limit of " +
                             std::to_string(kCheckpointMaxHeaderBytes) + " bytes: not a safetensors file");
  if (header_bytes > file_size - 8)
    throw bad_file(file, "header length " + std::to_string(header_bytes) + " runs past the end of the " +
                             std::to_string(file_size) + "-byte file: truncated or not a safetensors file");
  std::string header_text(header_bytes, '\0');
  if (!read_at(in, 8, header_text.data(), header_bytes)) throw bad_file(file, "cannot read the header");
  if (header_text.empty() || header_text[0] != '{')
    throw bad_file(file, "not a safetensors file: the header does not start with a JSON object");

  // nlohmann keeps the last of duplicate keys silently; a duplicated tensor name would
  // hide which bytes are meant, so find them while parsing.
  std::set<std::string> top_keys;
  std::string duplicate;
  const auto on_event = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth == 1 && event == Json::parse_event_t::key && !top_keys.insert(parsed.get<std::string>()).second)
      duplicate = parsed.get<std::string>();
    return true;
  };
  try {
    header = Json::parse(header_text, on_event);
  } catch (const Json::exception& e) {
    throw bad_file(
        file, std::string("the header is not valid JSON (truncated or not a safetensors file): ") + e.what());
  }
  if (!duplicate.empty()) throw bad_file(file, "the header names '" + duplicate + "' twice");
  if (!header.is_object()) throw bad_file(file, "the header is not a JSON object");

  return header_bytes;
}

// 2. Layout: every entry well-formed, in bounds, tiling the data section; the metadata
// apart.
void read_layout(const fs::path& file, const Json& header, std::uint64_t data_bytes,
                 std::map<std::string, std::string>& meta, std::map<std::string, TensorEntry>& tensors) {
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) throw bad_file(file, "__metadata__ is not a JSON object");
      for (const auto& [mkey, mvalue] : value.items()) {
        if (!mvalue.is_string()) throw bad_file(file, "metadata \"" + mkey + "\" is not a string");
        meta[mkey] = mvalue.get<std::string>();
      }
      continue;
    }
    tensors.emplace(key, parse_entry(file, key, value, data_bytes));
  }
  std::vector<const TensorEntry*> all;
  for (const auto& [name, entry] : tensors) all.push_back(&entry);
  check_tiling(file, all, data_bytes);
}

// 3. Metadata: format version, then which model wrote it, then where the run was.
TrainingState read_metadata(const fs::path& file, const std::map<std::string, std::string>& meta,
                            const Model& model) {
  const std::string version = metadata_value(file, meta, kKeyVersion);
  if (version != std::to_string(kCheckpointFormatVersion))
    throw bad_file(file, "format version " + version + ", this build reads version " +
                             std::to_string(kCheckpointFormatVersion));
  TrainingState state;
  state.fingerprint = metadata_value(file, meta, kKeyFingerprint);
  state.model = metadata_value(file, meta, kKeyModel);
  if (state.fingerprint != model.fingerprint())
    throw bad_file(file, "written for model " + state.fingerprint + " ('" + state.model +
                             "'), not for this model " + model.fingerprint() + " ('" + model.name() +
                             "'): resume with the model it was written for");
  state.step = parse_integer<std::int64_t>(file, kKeyStep, metadata_value(file, meta, kKeyStep));
  state.epoch = parse_integer<std::int64_t>(file, kKeyEpoch, metadata_value(file, meta, kKeyEpoch));
  state.epoch_step =
      parse_integer<std::int64_t>(file, kKeyEpochStep, metadata_value(file, meta, kKeyEpochStep));
  state.seed = parse_integer<std::uint64_t>(file, kKeySeed, metadata_value(file, meta, kKeySeed));
  state.rng_state = parse_words(file, metadata_value(file, meta, kKeyRng));
  state.optimizer = metadata_value(file, meta, kKeyOptimizer);
  state.optimizer_steps =
      parse_integer<std::int64_t>(file, kKeyOptimizerSteps, metadata_value(file, meta, kKeyOptimizerSteps));
  for (const auto& [key, value] : meta)
    if (!is_reserved_key(key)) state.extra[key] = value;

  return state;
}

// 4. Tensors: exactly the model's state (parameters and buffers, F32 or I64 for counters,
// the model's shapes) and optionally the optimizer state, whose entry is returned (null
// when absent).
const TensorEntry* check_tensors(const fs::path& file, const std::map<std::string, TensorEntry>& tensors,
                                 const Model& model) {
  std::set<std::string> expected;
  std::vector<const NamedTensor*> state;
  for (const auto& t : model.named_params()) state.push_back(&t);
  for (const auto& t : model.named_buffers()) state.push_back(&t);
  for (const NamedTensor* tp : state) {
    const NamedTensor& t = *tp;
    expected.insert(t.name);
    const auto it = tensors.find(t.name);
    if (it == tensors.end())
      throw bad_file(file, "missing tensor '" + t.name + "' of model " + model.fingerprint());
    const char* dtype = t.is_count ? "I64" : "F32";
    if (it->second.dtype != dtype)
      throw bad_file(file, "tensor '" + t.name + "' has dtype " + it->second.dtype + ", expected " + dtype);
    if (it->second.shape != dims_of(t.shape))
      throw bad_file(file, "tensor '" + t.name + "' has shape " + shape_text(it->second.shape) +
                               ", the model's is " + t.shape.str());
  }
  const TensorEntry* optimizer_entry = nullptr;
  if (const auto it = tensors.find(kOptimizerTensor); it != tensors.end()) {
    optimizer_entry = &it->second;
    if (optimizer_entry->dtype != "F32" || optimizer_entry->shape.size() != 1)
      throw bad_file(file, std::string("tensor '") + kOptimizerTensor + "' must be 1-D F32, found " +
                               optimizer_entry->dtype + " " + shape_text(optimizer_entry->shape));
    expected.insert(kOptimizerTensor);
  }
  for (const auto& [name, entry] : tensors)
    if (!expected.count(name))
      throw bad_file(file,
                     "unexpected tensor '" + name + "': not a parameter of model " + model.fingerprint());

  return optimizer_entry;
}

}  // namespace

TrainingState read_checkpoint(const fs::path& file, Model& model) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw bad_file(file, std::string("cannot open it: ") + std::strerror(errno));
  std::error_code ec;
  if (fs::is_directory(file, ec)) throw bad_file(file, "is a directory, not a checkpoint file");
  in.seekg(0, std::ios::end);
  const auto file_size = static_cast<std::uint64_t>(in.tellg());

  Json header;
  const std::uint64_t header_bytes = read_header(in, file, file_size, header);
  const std::uint64_t data_offset = 8 + header_bytes;
  const std::uint64_t data_bytes = file_size - data_offset;
  std::map<std::string, std::string> meta;
  std::map<std::string, TensorEntry> tensors;
  read_layout(file, header, data_bytes, meta, tensors);
  TrainingState state = read_metadata(file, meta, model);
  const TensorEntry* optimizer_entry = check_tensors(file, tensors, model);

  // 5. The data, read whole before anything is copied, so a short read leaves the model as it was.
  std::vector<char> data(data_bytes);
  if (!read_at(in, data_offset, data.data(), data_bytes))
    throw bad_file(file, "truncated: the data section could not be read whole");
  if (optimizer_entry) {
    state.optimizer_state.resize(static_cast<std::size_t>(optimizer_entry->shape[0]));
    std::memcpy(state.optimizer_state.data(), data.data() + optimizer_entry->begin,
                optimizer_entry->end - optimizer_entry->begin);
  }
  float* values = model.state().data();
  for (const auto& t : model.named_params()) {
    const TensorEntry& e = tensors.at(t.name);
    std::memcpy(values + t.offset, data.data() + e.begin, e.end - e.begin);
  }
  for (const auto& t : model.named_buffers()) {
    const TensorEntry& e = tensors.at(t.name);
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
