#include "model/data/dataset.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "model/data/idx.hpp"

namespace hearsay {
namespace {

namespace fs = std::filesystem;

// The first place a new user lands when the data is missing, so it says every way out.
std::string missing_data_help() {
  return "Install Fashion-MNIST with the Debian package dataset-fashion-mnist "
         "(sudo apt-get install dataset-fashion-mnist), or pass --data DIR / set HEARSAY_DATA to a directory "
         "holding the four MNIST-format IDX files, or use --data synthetic to train on generated data.";
}

// The .gz name wins because that is what the Debian package installs; a user who unpacked the
// files by hand still works.
std::string find_file(const std::string& dir, const std::string& base) {
  const fs::path plain = fs::path(dir) / base;
  const fs::path gzipped = fs::path(dir) / (base + ".gz");
  std::error_code ec;
  if (fs::exists(gzipped, ec)) return gzipped.string();
  if (fs::exists(plain, ec)) return plain.string();
  throw DataError("data directory '" + dir + "' is missing the file '" + gzipped.string() + "' (or '" +
                  plain.string() + "'). " + missing_data_help());
}

// The examples of `from` at indices, in that order: their labels, and their images made from
// `images` (from.count images of from.pixels() values) pixel by pixel with convert. select()
// copies floats; the loader converts the file's bytes of the kept examples only. An index
// outside `from` is a DataError that starts with `caller` and calls the set `set_name`.
template <class Pixel, class Convert>
Dataset pick_examples(const Dataset& from, const Pixel* images, const std::vector<std::int64_t>& indices,
                      Convert convert, const char* caller, const char* set_name) {
  Dataset out;
  out.rows = from.rows;
  out.cols = from.cols;
  out.classes = from.classes;
  out.count = static_cast<std::int64_t>(indices.size());
  const std::int64_t pixels = from.pixels();
  out.images.resize(static_cast<std::size_t>(out.count * pixels));
  out.labels.resize(indices.size());
  for (std::size_t k = 0; k < indices.size(); ++k) {
    const std::int64_t i = indices[k];
    if (i < 0 || i >= from.count)
      throw DataError(std::string(caller) + ": index " + std::to_string(i) + " is outside " + set_name +
                      " of " + std::to_string(from.count) + " examples");
    const Pixel* first = images + i * pixels;
    std::transform(first, first + pixels, out.images.data() + static_cast<std::int64_t>(k) * pixels, convert);
    out.labels[k] = from.labels[static_cast<std::size_t>(i)];
  }
  return out;
}

// Keeps all examples (keep empty) or those keep picks from the labels, in keep's order. Only the
// kept images are converted to float, so a peer's peak memory is its shard, not the whole set.
Dataset load_split(const std::string& dir, const std::string& images_base, const std::string& labels_base,
                   const TrainSelector& keep) {
  const std::string images_path = find_file(dir, images_base);
  const std::string labels_path = find_file(dir, labels_base);
  IdxArray images = read_idx(images_path);
  const IdxArray labels = read_idx(labels_path);

  const auto bad = [](const std::string& path, const std::string& what) {
    return DataError("IDX file '" + path + "': " + what);
  };
  if (images.dims.size() != 3)
    throw bad(images_path, "images must be 3-D (count x rows x cols) but the file has " +
                               std::to_string(images.dims.size()) + " dimensions");
  // The 65535 cap keeps rows * cols and the int fields far from overflow; real images are tiny.
  constexpr std::int64_t kMaxSide = 65535;
  if (images.dims[1] < 1 || images.dims[2] < 1 || images.dims[1] > kMaxSide || images.dims[2] > kMaxSide)
    throw bad(images_path, "image size " + std::to_string(images.dims[1]) + "x" +
                               std::to_string(images.dims[2]) +
                               " is not usable (each side must be 1 to 65535)");
  if (images.dims[0] < 1) throw bad(images_path, "holds no images");
  if (labels.dims.size() != 1)
    throw bad(labels_path,
              "labels must be 1-D but the file has " + std::to_string(labels.dims.size()) + " dimensions");
  if (labels.dims[0] != images.dims[0])
    throw DataError("image/label count mismatch: '" + images_path + "' holds " +
                    std::to_string(images.dims[0]) + " images but '" + labels_path + "' holds " +
                    std::to_string(labels.dims[0]) + " labels");

  Dataset d;
  d.count = images.dims[0];
  d.rows = static_cast<int>(images.dims[1]);
  d.cols = static_cast<int>(images.dims[2]);
  d.classes = 10;
  for (std::size_t i = 0; i < labels.data.size(); ++i) {
    if (labels.data[i] >= d.classes)
      throw bad(labels_path, "label " + std::to_string(labels.data[i]) + " at index " + std::to_string(i) +
                                 " is out of range (expected 0 to " + std::to_string(d.classes - 1) + ")");
  }
  d.labels = labels.data;
  // Division, not multiplication by 1/255, so that 255 becomes exactly 1.0f; it vectorizes anyway.
  const auto to_float = [](std::uint8_t v) { return static_cast<float>(v) / 255.0f; };
  if (!keep) {
    d.images.resize(images.data.size());
    std::transform(images.data.begin(), images.data.end(), d.images.begin(), to_float);
    return d;
  }
  return pick_examples(d, images.data.data(), keep(d), to_float, "load", "the training set");
}

}  // namespace

std::string resolve_data_dir(const std::string& flag_value) {
  if (!flag_value.empty()) return flag_value;
  if (const char* env = std::getenv("HEARSAY_DATA"); env != nullptr && *env != '\0') return env;
  return kDefaultDataDir;
}

TrainTest load_mnist_format(const std::string& dir) { return load_mnist_format(dir, TrainSelector{}); }

TrainTest load_mnist_format(const std::string& dir, const TrainSelector& keep) {
  TrainTest result;
  if (dir == "synthetic") {
    result.train = synthetic_dataset(6000, 1);
    if (keep) result.train = select(result.train, keep(result.train));
    result.test = synthetic_dataset(1000, 2);
    result.source = "synthetic";
    return result;
  }
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    const bool exists = fs::exists(dir, ec);
    throw DataError("data directory '" + dir + (exists ? "' is not a directory. " : "' does not exist. ") +
                    missing_data_help());
  }
  result.train = load_split(dir, "train-images-idx3-ubyte", "train-labels-idx1-ubyte", keep);
  result.test = load_split(dir, "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", TrainSelector{});
  if (result.train.rows != result.test.rows || result.train.cols != result.test.cols)
    throw DataError("data directory '" + dir + "': train images are " + std::to_string(result.train.rows) +
                    "x" + std::to_string(result.train.cols) + " but test images are " +
                    std::to_string(result.test.rows) + "x" + std::to_string(result.test.cols));
  result.source = dir;
  return result;
}

void gather_batch(const Dataset& d, std::span<const std::int64_t> indices, float* x, std::uint8_t* y) {
  const std::int64_t pixels = d.pixels();
  for (std::size_t k = 0; k < indices.size(); ++k) {
    std::copy_n(d.image(indices[k]), pixels, x + static_cast<std::int64_t>(k) * pixels);
    y[k] = d.labels[static_cast<std::size_t>(indices[k])];
  }
}

Dataset select(const Dataset& d, const std::vector<std::int64_t>& indices) {
  return pick_examples(
      d, d.images.data(), indices, [](float v) { return v; }, "select", "the dataset");
}

}  // namespace hearsay
