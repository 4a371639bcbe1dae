// Generated stand-in for Fashion-MNIST, so that every command works on a machine without the data
// package and tests do not depend on it. The problem is learnable but not trivial: classes are
// blob patterns that overlap, and every example is shifted, rescaled and noisy.
#include <algorithm>
#include <cmath>
#include <string>

#include "base/rng.hpp"
#include "model/data/dataset.hpp"

namespace hearsay {
namespace {

// Fixed, so that a train set and a test set made with different seeds share their classes.
constexpr std::uint64_t kPrototypeSeed = 0x6865617273617900ULL;  // "hearsay\0"
constexpr int kBlobsPerClass = 3;
constexpr double kNoiseHalfWidth = 0.6;  // triangular noise on [-0.6, 0.6], standard deviation ~0.245

// One [rows*cols] image per class: a sum of Gaussian blobs at random places, clamped to [0, 1].
std::vector<float> class_prototypes(int rows, int cols, int classes) {
  Rng rng(kPrototypeSeed);
  const double side = std::min(rows, cols);
  std::vector<float> prototypes(static_cast<std::size_t>(classes) * rows * cols, 0.0f);
  for (int c = 0; c < classes; ++c) {
    float* image = prototypes.data() + static_cast<std::size_t>(c) * rows * cols;
    for (int b = 0; b < kBlobsPerClass; ++b) {
      const double cy = (0.2 + 0.6 * rng.uniform()) * rows;
      const double cx = (0.2 + 0.6 * rng.uniform()) * cols;
      const double sigma = (0.08 + 0.12 * rng.uniform()) * side;
      const double amplitude = 0.5 + 0.5 * rng.uniform();
      for (int y = 0; y < rows; ++y) {
        for (int x = 0; x < cols; ++x) {
          const double r2 = (y - cy) * (y - cy) + (x - cx) * (x - cx);
          image[y * cols + x] += static_cast<float>(amplitude * std::exp(-r2 / (2.0 * sigma * sigma)));
        }
      }
    }
    for (int p = 0; p < rows * cols; ++p) image[p] = std::min(image[p], 1.0f);
  }
  return prototypes;
}

}  // namespace

Dataset synthetic_dataset(std::int64_t count, std::uint64_t seed, int rows, int cols, int classes) {
  if (count < 0 || rows < 1 || cols < 1 || rows > 65535 || cols > 65535 || classes < 1 || classes > 256)
    throw DataError("synthetic_dataset: bad shape (count " + std::to_string(count) + ", " +
                    std::to_string(rows) + "x" + std::to_string(cols) + ", " + std::to_string(classes) +
                    " classes); need count >= 0, sides 1 to 65535 and 1 to 256 classes");
  const std::vector<float> prototypes = class_prototypes(rows, cols, classes);

  Dataset d;
  d.count = count;
  d.rows = rows;
  d.cols = cols;
  d.classes = classes;
  d.images.resize(static_cast<std::size_t>(count * d.pixels()));
  d.labels.resize(static_cast<std::size_t>(count));

  Rng rng(seed);
  // Shifts of up to ~1/14 of the image (2 pixels at 28x28) so a model has to generalise over
  // position instead of memorising ten exact pictures.
  const int max_shift = std::max(1, std::min(rows, cols) / 14);
  for (std::int64_t i = 0; i < count; ++i) {
    const auto label = static_cast<int>(rng.below(static_cast<std::uint64_t>(classes)));
    d.labels[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(label);
    const int dy = static_cast<int>(rng.below(2 * max_shift + 1)) - max_shift;
    const int dx = static_cast<int>(rng.below(2 * max_shift + 1)) - max_shift;
    const double contrast = 0.7 + 0.4 * rng.uniform();
    const float* prototype = prototypes.data() + static_cast<std::size_t>(label) * rows * cols;
    float* image = d.images.data() + i * d.pixels();
    for (int y = 0; y < rows; ++y) {
      const int sy = y - dy;
      for (int x = 0; x < cols; ++x) {
        const int sx = x - dx;
        const double clean = (sy >= 0 && sy < rows && sx >= 0 && sx < cols) ? prototype[sy * cols + sx] : 0.0;
        const double noise = (rng.uniform() + rng.uniform() - 1.0) * kNoiseHalfWidth;
        image[y * cols + x] = static_cast<float>(std::clamp(contrast * clean + noise, 0.0, 1.0));
      }
    }
  }
  return d;
}

}  // namespace hearsay
