// The safetensors container (https://huggingface.co/docs/safetensors), read with every
// check a file from anywhere needs: the part of checkpoints (model/checkpoint.hpp) that
// knows nothing of models.
//
// Layout: 8-byte little-endian header length N, N bytes of JSON header (padded with
// spaces so the data starts 8-byte aligned), then the raw little-endian tensor data.
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}
// (offsets relative to the data start) and "__metadata__" to string pairs.
//
// Every error is a std::runtime_error that starts with "<what> '<file>': " (what:
// "checkpoint", "optimizer state"), so that a user knows which file to look at.
#pragma once
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace hearsay::safetensors {

// Largest JSON header accepted (the limit the safetensors library uses).
inline constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

struct Entry {
  std::string name, dtype;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;  // in the data section
};

// What a file's header says, checked: every entry well-formed, in bounds, and the
// entries tiling the data section exactly, without overlap or gap.
struct Layout {
  std::map<std::string, std::string> meta;  // __metadata__
  std::map<std::string, Entry> tensors;
  std::uint64_t data_offset = 0;  // 8 + header length
  std::uint64_t data_bytes = 0;
};

// Names the file in errors: "<what> '<file>': ...".
class Reader {
 public:
  // Opens file; throws (named) when it cannot be opened or is a directory.
  Reader(std::filesystem::path file, std::string what);
  const std::filesystem::path& file() const { return file_; }

  // The header and layout, checked (see Layout).
  Layout layout();
  // Bytes [offset, offset + n) of the file, whole, or an error naming the file.
  std::vector<char> read(std::uint64_t offset, std::uint64_t n);
  // The error for this file: "<what> '<file>': <text>".
  std::runtime_error error(const std::string& text) const;
  // The metadata value of key, or an error saying the file is not one of ours.
  std::string value(const Layout& layout, const std::string& key) const;
  // A metadata value that must be a non-negative integer.
  template <class Int>
  Int integer(const Layout& layout, const std::string& key) const {
    const std::string text = value(layout, key);
    return parse_integer<Int>(key, text);
  }
  template <class Int>
  Int parse_integer(const std::string& key, const std::string& text) const {
    Int parsed{};
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), parsed);
    bool negative = false;
    if constexpr (std::is_signed_v<Int>) negative = parsed < 0;
    if (ec != std::errc() || end != text.data() + text.size() || text.empty() || negative)
      throw error("metadata \"" + key + "\" is '" + text + "', not a non-negative integer");
    return parsed;
  }

 private:
  std::filesystem::path file_;
  std::string what_;
  std::ifstream in_;
  std::uint64_t size_ = 0;
};

// "[2,3]"
std::string shape_text(const std::vector<std::int64_t>& dims);
// The header JSON as written: padded with spaces so that 8 + its length is a multiple of 8.
std::string padded_header(const nlohmann::ordered_json& header);
// The 8 little-endian bytes of a header length.
std::string length_prefix(std::uint64_t header_bytes);

}  // namespace hearsay::safetensors
