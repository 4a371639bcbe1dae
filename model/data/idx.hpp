// Reader for the IDX format of MNIST and Fashion-MNIST (http://yann.lecun.com/exdb/mnist/):
// two zero bytes, a type byte, a dimension count, that many big-endian uint32 sizes, then the
// elements in row-major order. Only unsigned bytes (type 0x08) are supported: that is what every
// MNIST-format data set uses, and it lets the reader hand back the raw bytes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/data/dataset.hpp"

namespace hearsay {

struct IdxArray {
  std::vector<std::int64_t> dims;  // 1 to 4 sizes, outermost first
  std::vector<std::uint8_t> data;  // product(dims) bytes
};

// The most element bytes read_idx accepts. Sizes come from the file, so a corrupt or hostile
// header must not be able to make us allocate without bound.
inline constexpr std::int64_t kMaxIdxBytes = std::int64_t{1} << 31;

// Reads one IDX file, plain or gzip-compressed (recognised by the 1f 8b magic, whatever its name).
// Validates it fully and throws DataError, naming path, when the magic or type is wrong, the sizes
// are absurd, the data is shorter or longer than the header announces, or the gzip stream is
// corrupt. Memory grows with the bytes actually read, never with the announced size alone.
IdxArray read_idx(const std::string& path);

}  // namespace hearsay
