// In-memory image classification data: the Dataset every peer trains on, where it comes from
// (MNIST-format IDX files on disk, or a synthetic stand-in), and how to take a subset of it.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace hearsay {

// Anything wrong with the data a run was pointed at: missing files, corrupt or hostile files,
// bad partition or shard strings. The message always names the offending path or text.
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Images already scaled to [0, 1] as float, row-major [count][rows * cols]; one label per image.
struct Dataset {
  std::int64_t count = 0;
  int rows = 0, cols = 0, classes = 10;
  std::vector<float> images;         // count * rows * cols
  std::vector<std::uint8_t> labels;  // count, each < classes

  // No bounds check: this sits in the batch-assembly loop; i must be in [0, count).
  const float* image(std::int64_t i) const { return images.data() + i * pixels(); }
  std::int64_t pixels() const { return static_cast<std::int64_t>(rows) * cols; }
};

struct TrainTest {
  Dataset train, test;
  std::string source;  // the directory the files were read from, or "synthetic"
};

// The standard place the Debian package dataset-fashion-mnist installs to.
inline constexpr const char* kDefaultDataDir = "/usr/share/datasets/fashion-mnist";

// Where to load data from: the explicit flag value if non-empty, else the environment variable
// HEARSAY_DATA if set and non-empty, else kDefaultDataDir.
std::string resolve_data_dir(const std::string& flag_value);

// Loads train-{images-idx3,labels-idx1}-ubyte and t10k-{images-idx3,labels-idx1}-ubyte from dir,
// each preferring the ".gz" name when it exists. dir == "synthetic" gives synthetic_dataset()
// with 6000 train (seed 1) and 1000 test (seed 2) examples instead. Throws DataError.
TrainTest load_mnist_format(const std::string& dir);

// Picks which training examples to keep, by index, from a dataset's count, classes and labels;
// its images may not be loaded yet (they are empty when the files are being read).
using TrainSelector = std::function<std::vector<std::int64_t>(const Dataset& labels_only)>;
// As above, but the train set holds only the examples keep picked, in keep's order, and only those
// are ever converted to float: a peer of N holds 1/N of the training set, not all of it.
// Throws DataError when keep returns an index outside the training set.
TrainTest load_mnist_format(const std::string& dir, const TrainSelector& keep);

// A learnable stand-in for Fashion-MNIST when the real files are not installed. Every class has a
// fixed prototype image (smooth blobs) that does not depend on seed, so a train set and a test set
// made with different seeds share their classes; seed only drives labels, shifts and noise.
Dataset synthetic_dataset(std::int64_t count, std::uint64_t seed, int rows = 28, int cols = 28,
                          int classes = 10);

// The examples at indices, in that order. Throws DataError on an index outside [0, d.count).
Dataset select(const Dataset& d, const std::vector<std::int64_t>& indices);
// Copies the images and labels of d at indices into one batch: x [indices.size() x
// d.pixels()], y [indices.size()]. The training loops' gather: indices are not checked
// (they come from shard_indices, which only returns valid ones).
void gather_batch(const Dataset& d, std::span<const std::int64_t> indices, float* x, std::uint8_t* y);

}  // namespace hearsay
