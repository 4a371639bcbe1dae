// Every layer against a double-precision reference (tests/reference_layers.hpp):
// the fp32 forward must match it, and the fp32 analytic backward must match central
// finite differences of the double reference for parameters and inputs.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include "kernels/cpu/softmax_xent.hpp"
#include "layer_check.hpp"
#include "model/flat_buffer.hpp"
#include "model/layers/conv2d.hpp"
#include "model/layers/elementwise.hpp"
#include "model/layers/linear.hpp"
#include "model/layers/pool2d.hpp"
#include "reference_layers.hpp"

using namespace hearsay;
using reference::Vec;
using namespace hearsay::testing;

namespace {

RefForward with_relu(RefForward f) {
  return [f](const Vec& p, const Vec& x) { return reference::relu(f(p, x)); };
}

}  // namespace

TEST_CASE("Linear matches the reference and finite differences", "[layers][gradcheck]") {
  for (bool fused : {false, true}) {
    Linear layer(13, 7);
    layer.set_fused_relu(fused);
    RefForward ref = [](const Vec& p, const Vec& x) { return reference::linear(p, x, 3, 13, 7); };
    check_layer(layer, Shape{3, 13}, fused ? with_relu(ref) : ref, 11);
  }
}

TEST_CASE("Conv2d matches the reference for strides, paddings and fused ReLU", "[layers][gradcheck]") {
  struct Geometry {
    int c, h, w, oc, k, stride, pad, n = 2;
  };
  // LeNet's two convolutions, padding, stride 2, a non-square input, 1x1 and a
  // row wider than one 16-lane vector (exercises the chunked AVX-512 path). The
  // second and the last have >= 64 column rows, so they take the small_gemm + im2row
  // path, also with an image wider than 16. 5x5 stride-1 kernels with >= 4 input
  // channels run as Winograd F(3x3, 5x5): with padding and outputs that leave partial
  // 3x3 tiles (8x7, 16x15: 60 tiles over the batch, so two tile groups and a partial
  // 16-lane block), and LeNet's 13x13 -> 9x9, whose tiles fit exactly. 3x3 stride-1
  // kernels with >= 8 input channels run as F(4x4, 3x3): 5x17 and 7x7 with padding 1,
  // 5x9 without (partial 4x4 blocks), batch 1 and 2, and 17x15 (20 tiles an image: two
  // tile groups over the batch).
  const Geometry cases[] = {{1, 28, 28, 4, 3, 1, 0},   {3, 13, 13, 5, 5, 1, 0},  {2, 7, 9, 3, 3, 1, 1},
                            {2, 9, 8, 3, 3, 2, 1},     {3, 5, 5, 4, 1, 1, 0},    {1, 6, 21, 2, 3, 1, 2},
                            {4, 8, 7, 6, 5, 1, 2},     {8, 5, 17, 3, 3, 1, 1},   {5, 16, 15, 3, 5, 1, 2},
                            {8, 13, 13, 6, 5, 1, 0},   {8, 7, 7, 5, 3, 1, 1, 1}, {9, 7, 7, 4, 3, 1, 1},
                            {10, 5, 9, 3, 3, 1, 0, 1}, {8, 5, 9, 6, 3, 1, 0},    {8, 17, 15, 3, 3, 1, 1}};
  for (const auto& g : cases) {
    for (bool fused : {false, true}) {
      Conv2d layer(g.c, g.oc, g.k, g.stride, g.pad);
      layer.set_fused_relu(fused);
      RefForward ref = [g](const Vec& p, const Vec& x) {
        return reference::conv2d(p, x, g.n, g.c, g.h, g.w, g.oc, g.k, g.stride, g.pad);
      };
      check_layer(layer, Shape{g.n, g.c, g.h, g.w}, fused ? with_relu(ref) : ref, 21);
    }
  }
}

TEST_CASE("AvgPool2d and MaxPool2d match the reference", "[layers][gradcheck]") {
  struct Geometry {
    int h, w, k, s;
  };
  for (const auto& g :
       {Geometry{26, 26, 2, 2}, Geometry{9, 9, 2, 2}, Geometry{7, 8, 3, 2}, Geometry{6, 6, 3, 3}}) {
    AvgPool2d avg(g.k, g.s);
    check_layer(
        avg, Shape{2, 3, g.h, g.w},
        [g](const Vec&, const Vec& x) { return reference::pool(x, 6, g.h, g.w, g.k, g.s, false); }, 31);
    MaxPool2d max(g.k, g.s);
    check_layer(
        max, Shape{2, 3, g.h, g.w},
        [g](const Vec&, const Vec& x) { return reference::pool(x, 6, g.h, g.w, g.k, g.s, true); }, 32);
  }
}

TEST_CASE("ReLU and Flatten match the reference", "[layers][gradcheck]") {
  ReLU relu;
  check_layer(
      relu, Shape{3, 2, 5, 5}, [](const Vec&, const Vec& x) { return reference::relu(x); }, 41);
  Flatten flatten;
  check_layer(
      flatten, Shape{3, 2, 5, 5}, [](const Vec&, const Vec& x) { return x; }, 42);
}

TEST_CASE("softmax cross-entropy: loss and gradient against double finite differences",
          "[layers][gradcheck]") {
  Rng rng(51);
  const int n = 5, classes = 10;
  std::vector<float> z(n * classes);
  for (auto& v : z) v = static_cast<float>(rng.normal() * 3);
  z[7] = 80.0f;  // large logits must not overflow (the max is subtracted)
  std::vector<std::uint8_t> labels(n);
  for (auto& l : labels) l = static_cast<std::uint8_t>(rng.below(classes));
  std::vector<float> dz(z.size());
  const auto r = cpu::softmax_xent(n, classes, z.data(), labels.data(), 1.0f / n, dz.data());
  const Vec zd(z.begin(), z.end());
  REQUIRE(r.loss_sum / n == Approx(reference::cross_entropy(zd, labels, classes)).epsilon(1e-6));
  REQUIRE(std::isfinite(r.loss_sum));
  // Smooth function: central differences have O(h^2) = 1e-10 truncation error.
  const double h = 1e-5;
  for (std::size_t i = 0; i < z.size(); ++i) {
    Vec plus = zd, minus = zd;
    plus[i] += h;
    minus[i] -= h;
    const double numeric =
        (reference::cross_entropy(plus, labels, classes) - reference::cross_entropy(minus, labels, classes)) /
        (2 * h);
    REQUIRE(std::abs(dz[i] - numeric) <= 1e-6 + 1e-4 * std::abs(numeric));
  }
  // Accuracy count: argmax against labels.
  long correct = 0;
  for (int i = 0; i < n; ++i) {
    int arg = 0;
    for (int c = 1; c < classes; ++c)
      if (z[static_cast<std::size_t>(i * classes + c)] > z[static_cast<std::size_t>(i * classes + arg)])
        arg = c;
    correct += arg == labels[static_cast<std::size_t>(i)];
  }
  REQUIRE(r.correct == correct);
}
