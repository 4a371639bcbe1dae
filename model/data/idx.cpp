#include "model/data/idx.hpp"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

namespace hearsay {
namespace {

constexpr std::size_t kReadChunk = std::size_t{16} << 20;  // large reads keep zlib and stdio fast

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw DataError("IDX file '" + path + "': " + what);
}

std::string dims_text(const std::vector<std::int64_t>& dims) {
  std::string text;
  for (std::size_t i = 0; i < dims.size(); ++i) text += (i ? "x" : "") + std::to_string(dims[i]);
  return text;
}

// A stream of file bytes: read() returns fewer than asked only at the end of the data and throws
// DataError on any I/O or decompression error, so callers only ever see good bytes.
class ByteReader {
 public:
  virtual ~ByteReader() = default;
  virtual std::size_t read(void* buffer, std::size_t size) = 0;
  // Bytes left in the file when that is known without reading it (plain files), for exact checks
  // of the announced size before anything is allocated.
  virtual std::optional<std::int64_t> remaining() const = 0;
  // A hard upper bound on the bytes read() can still deliver, known from the file size alone.
  virtual std::int64_t max_remaining() const = 0;
};

class PlainReader final : public ByteReader {
 public:
  PlainReader(std::FILE* file, std::string path) : file_(file), path_(std::move(path)) {
    if (std::fseek(file_.get(), 0, SEEK_END) != 0)
      fail(path_, "cannot seek: " + std::string(std::strerror(errno)));
    const long size = std::ftell(file_.get());
    if (size < 0 || std::fseek(file_.get(), 0, SEEK_SET) != 0)
      fail(path_, "cannot determine its size: " + std::string(std::strerror(errno)));
    remaining_ = size;
  }
  std::size_t read(void* buffer, std::size_t size) override {
    const std::size_t got = std::fread(buffer, 1, size, file_.get());
    if (got < size && std::ferror(file_.get()))
      fail(path_, "read error: " + std::string(std::strerror(errno)));
    remaining_ -= static_cast<std::int64_t>(got);
    return got;
  }
  std::optional<std::int64_t> remaining() const override { return remaining_; }
  std::int64_t max_remaining() const override { return remaining_; }

 private:
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, Closer> file_;
  std::string path_;
  std::int64_t remaining_ = 0;
};

class GzipReader final : public ByteReader {
 public:
  explicit GzipReader(std::string path) : path_(std::move(path)) {
    file_.reset(gzopen(path_.c_str(), "rb"));
    if (!file_) fail(path_, "cannot open for gzip reading: " + std::string(std::strerror(errno)));
    gzbuffer(file_.get(), 1u << 20);  // the default 8 KiB input buffer makes inflate call read() too often
    std::error_code ec;
    const auto compressed = std::filesystem::file_size(path_, ec);
    // Deflate cannot expand more than 1032:1 (zlib FAQ), so this bounds the output soundly.
    max_output_ = ec ? 0 : static_cast<std::int64_t>(compressed) * 1032 + 1024;
  }
  std::size_t read(void* buffer, std::size_t size) override {
    std::size_t total = 0;
    auto* out = static_cast<unsigned char*>(buffer);
    while (total < size) {
      const auto want = static_cast<unsigned>(std::min(size - total, kReadChunk));
      const int got = gzread(file_.get(), out + total, want);
      check_error();
      if (got <= 0) break;
      total += static_cast<std::size_t>(got);
      if (static_cast<unsigned>(got) < want) break;
    }
    return total;
  }
  std::optional<std::int64_t> remaining() const override { return std::nullopt; }
  std::int64_t max_remaining() const override { return max_output_; }

 private:
  // zlib reports a cut-off stream as Z_BUF_ERROR with a short read, and damage as Z_DATA_ERROR;
  // both must stop the load rather than pass off a partial array as the whole.
  void check_error() {
    int code = Z_OK;
    const char* message = gzerror(file_.get(), &code);
    if (code == Z_OK) return;
    const std::string zlib_text = message ? message : "unknown error";
    if (code == Z_BUF_ERROR) fail(path_, "truncated gzip stream (zlib: " + zlib_text + ")");
    if (code == Z_ERRNO) fail(path_, "read error: " + std::string(std::strerror(errno)));
    fail(path_, "corrupt gzip data (zlib: " + zlib_text + ")");
  }
  struct Closer {
    void operator()(gzFile f) const { gzclose(f); }
  };
  std::string path_;
  std::unique_ptr<gzFile_s, Closer> file_;
  std::int64_t max_output_ = 0;
};

std::unique_ptr<ByteReader> open_reader(const std::string& path) {
  // fopen() happily opens a directory on Linux and only fread() fails, with a vaguer message.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail(path, "is a directory, not a file");
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (!file) fail(path, "cannot open: " + std::string(std::strerror(errno)));
  unsigned char magic[2] = {0, 0};
  const std::size_t got = std::fread(magic, 1, 2, file);
  if (got == 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
    std::fclose(file);
    return std::make_unique<GzipReader>(path);
  }
  std::rewind(file);
  return std::make_unique<PlainReader>(file, path);
}

// The magic number and the dimensions: array.dims set, and the number of data bytes they
// announce returned.
std::int64_t read_header(ByteReader& reader, const std::string& path, IdxArray& array) {
  unsigned char magic[4];
  if (reader.read(magic, 4) != 4) fail(path, "truncated: the file ends inside the 4-byte magic number");
  if (magic[0] != 0 || magic[1] != 0) {
    char text[96];
    std::snprintf(text, sizeof text,
                  "bad magic number %02x %02x %02x %02x: an IDX file starts with two zero bytes", magic[0],
                  magic[1], magic[2], magic[3]);
    fail(path, text);
  }
  if (magic[2] != 0x08) {
    char text[96];
    std::snprintf(text, sizeof text,
                  "unsupported element type 0x%02x: only unsigned bytes (0x08) are supported", magic[2]);
    fail(path, text);
  }
  const int ndims = magic[3];
  if (ndims < 1 || ndims > 4)
    fail(path, "bad dimension count " + std::to_string(ndims) + " (expected 1 to 4)");

  unsigned char size_bytes[16];
  const auto size_length = static_cast<std::size_t>(4 * ndims);
  if (reader.read(size_bytes, size_length) != size_length)
    fail(path, "truncated: the file ends inside the dimension sizes");

  bool any_zero = false;
  for (int i = 0; i < ndims; ++i) {
    const unsigned char* b = size_bytes + 4 * i;
    const std::uint32_t dim = (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) |
                              (std::uint32_t{b[2]} << 8) | std::uint32_t{b[3]};
    array.dims.push_back(dim);
    any_zero = any_zero || dim == 0;
  }
  // Multiply with a cap at every step so four 32-bit sizes cannot overflow 64 bits.
  std::int64_t total = any_zero ? 0 : 1;
  for (std::int64_t dim : array.dims) {
    if (total != 0 && dim > kMaxIdxBytes / total)
      fail(path, "absurd dimensions " + dims_text(array.dims) + ": more than " +
                     std::to_string(kMaxIdxBytes) + " bytes of data; the header is corrupt");
    total *= dim;
  }
  return total;
}

// The data of a file whose length is known: exactly `total` bytes must follow the header.
void read_data_of_length(ByteReader& reader, const std::string& path, std::int64_t total, std::int64_t left,
                         IdxArray& array) {
  if (left < total)
    fail(path, "truncated: dimensions " + dims_text(array.dims) + " announce " + std::to_string(total) +
                   " data bytes but only " + std::to_string(left) + " follow the header");
  if (left > total)
    fail(path, "trailing garbage: " + std::to_string(left - total) + " bytes after the " +
                   std::to_string(total) + " data bytes that dimensions " + dims_text(array.dims) +
                   " announce");
  array.data.resize(static_cast<std::size_t>(total));
  if (reader.read(array.data.data(), array.data.size()) != array.data.size())
    fail(path, "truncated: the file shrank while it was being read");
}

// Compressed: the real length is unknown until the stream ends. Reserve what the compressed size
// can possibly hold (all of it for an honest file, so no regrowth copies), and grow with what
// arrives beyond that: a 100-byte file announcing 1 GiB costs ~100 KiB, not 1 GiB.
void read_data_of_stream(ByteReader& reader, const std::string& path, std::int64_t total, IdxArray& array) {
  std::size_t have = 0;
  const auto want = static_cast<std::size_t>(total);
  array.data.reserve(
      static_cast<std::size_t>(std::min(total, std::max<std::int64_t>(reader.max_remaining(), 0))));
  while (have < want) {
    if (array.data.capacity() < std::min(want, have + kReadChunk))
      array.data.reserve(std::min(want, std::max(kReadChunk, 2 * array.data.capacity())));
    const std::size_t step = std::min(want - have, array.data.capacity() - have);
    array.data.resize(have + step);
    const std::size_t got = reader.read(array.data.data() + have, step);
    have += got;
    if (got < step) break;
  }
  if (have < want)
    fail(path, "truncated: dimensions " + dims_text(array.dims) + " announce " + std::to_string(total) +
                   " data bytes but the stream ends after " + std::to_string(have));
  unsigned char extra;
  if (reader.read(&extra, 1) != 0)
    fail(path, "trailing garbage: more data after the " + std::to_string(total) + " bytes that dimensions " +
                   dims_text(array.dims) + " announce");
}

}  // namespace

IdxArray read_idx(const std::string& path) {
  const auto reader = open_reader(path);
  IdxArray array;
  const std::int64_t total = read_header(*reader, path, array);
  if (const auto left = reader->remaining()) {
    read_data_of_length(*reader, path, total, *left, array);
  } else {
    read_data_of_stream(*reader, path, total, array);
  }
  return array;
}

}  // namespace hearsay
