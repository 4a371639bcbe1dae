#include "model/safetensors.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>
#include <tuple>

namespace hearsay::safetensors {

namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

std::size_t dtype_bytes(const std::string& dtype) {
  static const std::map<std::string, std::size_t> sizes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},  {"I32", 4},     {"I16", 2},    {"I8", 1},
      {"U64", 8}, {"U32", 4}, {"U16", 2}, {"U8", 1},   {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  const auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

}  // namespace

std::string shape_text(const std::vector<std::int64_t>& dims) {
  std::string s = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  return s + "]";
}

std::string padded_header(const nlohmann::ordered_json& header) {
  std::string text = header.dump();
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');
  return text;
}

std::string length_prefix(std::uint64_t header_bytes) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[static_cast<std::size_t>(i)] = static_cast<char>((header_bytes >> (8 * i)) & 0xff);
  return bytes;
}

Reader::Reader(fs::path file, std::string what)
    : file_(std::move(file)), what_(std::move(what)), in_(file_, std::ios::binary) {
  if (!in_) throw error(std::string("cannot open it: ") + std::strerror(errno));
  std::error_code ec;
  if (fs::is_directory(file_, ec)) throw error("is a directory, not a safetensors file");
  in_.seekg(0, std::ios::end);
  size_ = static_cast<std::uint64_t>(in_.tellg());
}

std::runtime_error Reader::error(const std::string& text) const {
  return std::runtime_error(what_ + " '" + file_.string() + "': " + text);
}

std::string Reader::value(const Layout& layout, const std::string& key) const {
  const auto it = layout.meta.find(key);
  if (it == layout.meta.end())
    throw error("metadata has no \"" + key + "\" (not a hearsay checkpoint?)");
  return it->second;
}

std::vector<char> Reader::read(std::uint64_t offset, std::uint64_t n) {
  std::vector<char> out(n);
  in_.clear();
  in_.seekg(static_cast<std::streamoff>(offset));
  in_.read(out.data(), static_cast<std::streamsize>(n));
  if (static_cast<std::uint64_t>(in_.gcount()) != n)
    throw error("truncated: " + std::to_string(n) + " bytes at offset " + std::to_string(offset) +
                " could not be read whole");
  return out;
}

namespace {

// 1. The header length and the header, a JSON object without duplicate keys.
Json read_header(Reader& r, std::uint64_t file_size, std::uint64_t& header_bytes) {
  if (file_size < 8)
    throw r.error("truncated: " + std::to_string(file_size) +
                  " bytes, fewer than the 8-byte header length of a safetensors file");
  const std::vector<char> length_bytes = r.read(0, 8);
  header_bytes = 0;
  for (int i = 7; i >= 0; --i)
    header_bytes = (header_bytes << 8) | static_cast<unsigned char>(length_bytes[static_cast<std::size_t>(i)]);
  if (header_bytes > kMaxHeaderBytes)
    throw r.error("header length " + std::to_string(header_bytes) + " exceeds the limit of " +
                  std::to_string(kMaxHeaderBytes) + " bytes: not a safetensors file");
  if (header_bytes > file_size - 8)
    throw r.error("header length " + std::to_string(header_bytes) + " runs past the end of the " +
                  std::to_string(file_size) + "-byte file: truncated or not a safetensors file");
  const std::vector<char> raw = r.read(8, header_bytes);
  const std::string header_text(raw.begin(), raw.end());
  if (header_text.empty() || header_text[0] != '{')
    throw r.error("not a safetensors file: the header does not start with a JSON object");

  // nlohmann keeps the last of duplicate keys silently; a duplicated tensor name would
  // hide which bytes are meant, so find them while parsing.
  std::set<std::string> top_keys;
  std::string duplicate;
  const auto on_event = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth == 1 && event == Json::parse_event_t::key && !top_keys.insert(parsed.get<std::string>()).second)
      duplicate = parsed.get<std::string>();
    return true;
  };
  Json header;
  try {
    header = Json::parse(header_text, on_event);
  } catch (const Json::exception& e) {
    throw r.error(std::string("the header is not valid JSON (truncated or not a safetensors file): ") + e.what());
  }
  if (!duplicate.empty()) throw r.error("the header names '" + duplicate + "' twice");
  if (!header.is_object()) throw r.error("the header is not a JSON object");
  return header;
}

Entry parse_entry(const Reader& r, const std::string& name, const Json& j, std::uint64_t data_bytes) {
  const auto fail = [&](const std::string& what) { return r.error("tensor '" + name + "' " + what); };
  if (!j.is_object()) throw fail("is not a JSON object");
  Entry e;
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
void check_tiling(const Reader& r, std::vector<const Entry*> entries, std::uint64_t data_bytes) {
  std::sort(entries.begin(), entries.end(), [](const Entry* a, const Entry* b) {
    return std::tie(a->begin, a->end) < std::tie(b->begin, b->end);
  });
  std::uint64_t at = 0;
  const Entry* previous = nullptr;
  for (const auto* e : entries) {
    if (e->begin < at)
      throw r.error("tensors '" + previous->name + "' and '" + e->name + "' overlap in the data section");
    if (e->begin > at)
      throw r.error("bytes [" + std::to_string(at) + ", " + std::to_string(e->begin) +
                    ") of the data section belong to no tensor");
    at = e->end;
    previous = e;
  }
  if (at != data_bytes)
    throw r.error(std::to_string(data_bytes - at) + " bytes after the last tensor belong to no tensor");
}

}  // namespace

Layout Reader::layout() {
  std::uint64_t header_bytes = 0;
  const Json header = read_header(*this, size_, header_bytes);
  Layout layout;
  layout.data_offset = 8 + header_bytes;
  layout.data_bytes = size_ - layout.data_offset;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) throw error("__metadata__ is not a JSON object");
      for (const auto& [mkey, mvalue] : value.items()) {
        if (!mvalue.is_string()) throw error("metadata \"" + mkey + "\" is not a string");
        layout.meta[mkey] = mvalue.get<std::string>();
      }
      continue;
    }
    layout.tensors.emplace(key, parse_entry(*this, key, value, layout.data_bytes));
  }
  std::vector<const Entry*> all;
  for (const auto& [name, entry] : layout.tensors) all.push_back(&entry);
  check_tiling(*this, all, layout.data_bytes);
  return layout;
}

}  // namespace hearsay::safetensors
