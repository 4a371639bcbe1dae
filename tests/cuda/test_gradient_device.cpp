// Finite differences on the device: the gradient the CUDA session computes for a small
// model with every layer kind LeNet uses (a strided, padded convolution with a ReLU fused
// into it and masked by the following average pool, a linear layer with a fused ReLU of its
// own, flatten, the softmax cross-entropy) against central differences of the loss the same
// session reports, for every parameter and along the gradient's own direction.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "base/rng.hpp"
#include "model/data/dataset.hpp"
#include "model/layers/conv2d.hpp"
#include "model/layers/elementwise.hpp"
#include "model/layers/linear.hpp"
#include "model/layers/pool2d.hpp"
#include "model/optim/optimizer.hpp"
#include "model/training_session.hpp"

using namespace hearsay;

namespace {

constexpr std::int64_t kImages = 4;
constexpr double kEps = 1e-2;

// in [1,8,8] -> conv 3@3x3 stride 2 pad 1 [3,4,4] -> relu -> avgpool 2 [3,2,2] -> flatten
// [12] -> linear 8 -> relu -> linear 10.
std::unique_ptr<Model> small_model() {
  std::vector<std::unique_ptr<Layer>> layers;
  layers.push_back(std::make_unique<Conv2d>(1, 3, 3, 2, 1));
  layers.push_back(std::make_unique<ReLU>());
  layers.push_back(std::make_unique<AvgPool2d>(2));
  layers.push_back(std::make_unique<Flatten>());
  layers.push_back(std::make_unique<Linear>(12, 8));
  layers.push_back(std::make_unique<ReLU>());
  layers.push_back(std::make_unique<Linear>(8, 10));
  return std::make_unique<Model>("gradcheck", Shape{1, 8, 8}, 10, std::move(layers));
}

// A ReLU has a kink at 0, where a central difference means nothing. So every unit that
// feeds a ReLU gets bias +1 (even units: on) or -1 (odd units: off) and a weight row whose
// L1 norm times the largest input is at most 0.5: its pre-activation stays at least 0.5
// away from 0 for any input of the data. Both sides of the ReLU are still exercised.
void keep_away_from_kinks(std::span<float> p, const NamedTensor& w, const NamedTensor& b, double input_max) {
  const std::int64_t rows = w.shape[0], cols = w.shape.numel() / rows;
  const double limit = 0.5 / input_max;
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto row = p.subspan(static_cast<std::size_t>(w.offset + r * cols), static_cast<std::size_t>(cols));
    double l1 = 0;
    for (float x : row) l1 += std::fabs(double(x));
    if (l1 > limit)
      for (float& x : row) x = static_cast<float>(double(x) * limit / l1 * (1 - 1e-6));
    p[static_cast<std::size_t>(b.offset + r)] = r % 2 == 0 ? 1.0f : -1.0f;
  }
}

Dataset random_images(std::uint64_t seed) {
  Dataset d;
  d.count = kImages;
  d.rows = d.cols = 8;
  d.classes = 10;
  Rng rng(seed);
  d.images.resize(static_cast<std::size_t>(kImages * 64));
  for (auto& x : d.images) x = static_cast<float>(rng.uniform());  // [0, 1)
  for (std::int64_t i = 0; i < kImages; ++i) d.labels.push_back(static_cast<std::uint8_t>(rng.below(10)));
  return d;
}

// The small model on the GPU with plain SGD (no state: p -= lr * g), data bound.
struct Fixture {
  std::unique_ptr<Model> model = small_model();
  std::unique_ptr<Optimizer> optimizer = make_sgd(static_cast<std::size_t>(model->param_count()), {});
  Dataset data = random_images(11);
  std::unique_ptr<TrainingSession> session;
  std::vector<std::int64_t> all{0, 1, 2, 3};
  std::vector<float> p0;

  Fixture() {
    model->init(7);
    const auto& t = model->named_params();  // 0.weight 0.bias 4.weight 4.bias 6.weight 6.bias
    REQUIRE(t.size() == 6);
    keep_away_from_kinks(model->params(), t[0], t[1], 1.0);  // the pixels are in [0, 1)
    keep_away_from_kinks(model->params(), t[2], t[3], 1.5);  // pooled ReLU outputs: <= 1 + 0.5
    p0.assign(model->params().begin(), model->params().end());
    session = make_training_session(Device{Device::Kind::cuda, 0}, *model, *optimizer, {1, kImages});
    session->bind_data(data, data);
  }

  // The mean loss over the four images at parameters p (on the host).
  double loss_at(const std::vector<float>& p) {
    std::copy(p.begin(), p.end(), model->params().begin());
    session->params_from_host();
    const BatchStats s = session->compute_gradients(all);
    return s.loss_sum / double(s.count);
  }

  // The session's gradient at p0. The session has no gradient read-back, so it is read
  // through one SGD step with lr 1: g = p0 - (p0 - g), exact to an ulp of max(|p0|, |g|)
  // (~1e-7 here), far below the bounds below. The device is then put back at p0.
  std::vector<double> gradient() {
    loss_at(p0);
    session->apply_update(1.0f);
    session->params_to_host();
    std::vector<double> g(p0.size());
    for (std::size_t i = 0; i < g.size(); ++i) g[i] = double(p0[i]) - double(model->params()[i]);
    loss_at(p0);
    return g;
  }
};

// Whether the central difference (lp - lm) / h matches the analytic slope `want`.
//
// Inside the box of the perturbations no ReLU changes side (keep_away_from_kinks leaves a
// margin of 0.5; a step of 1e-2 in one parameter moves a pre-activation by at most
// 1e-2 * 1.5, and the whole-vector step of the directional check by under 0.15), so the
// loss is smooth there and the central difference is off by its truncation error
// eps^2/6 * |L'''| (~2e-5: the logits move by at most ~1 per unit of a parameter and the
// cross-entropy's third derivative is below 1) plus rounding: the fp32 logits give the mean
// loss to ~3e-7, i.e. ~3e-5 after dividing by 2 eps. 3e-4 absolute is 5x their sum; the
// 1e-2 relative part covers larger curvature where the gradient itself is large.
bool matches(double lp, double lm, double h, double want) {
  const double fd = (lp - lm) / h;
  return std::fabs(fd - want) <= 1e-2 * std::fabs(want) + 3e-4;
}

}  // namespace

TEST_CASE("the CUDA session's gradient matches finite differences", "[cuda][session][gradcheck]") {
  Fixture f;
  const std::vector<double> g = f.gradient();
  double largest = 0;
  for (double x : g) largest = std::max(largest, std::fabs(x));
  INFO("largest |gradient| " << largest);
  // Not vacuous: the output layer's bias gradient alone is of order 0.1.
  REQUIRE(largest > 1e-2);

  SECTION("every parameter") {
    std::size_t bad = 0, first_bad = 0;
    double first_fd = 0;
    for (std::size_t i = 0; i < g.size(); ++i) {
      std::vector<float> plus = f.p0, minus = f.p0;
      plus[i] = static_cast<float>(double(f.p0[i]) + kEps);
      minus[i] = static_cast<float>(double(f.p0[i]) - kEps);
      // The step actually taken after rounding to fp32.
      const double h = double(plus[i]) - double(minus[i]);
      const double lp = f.loss_at(plus), lm = f.loss_at(minus);
      if (!matches(lp, lm, h, g[i]) && bad++ == 0) {
        first_bad = i;
        first_fd = (lp - lm) / h;
      }
    }
    INFO(bad << " of " << g.size() << " parameters differ; first: parameter " << first_bad << ", gradient "
             << g[first_bad] << ", finite difference " << first_fd);
    CHECK(bad == 0);
  }

  SECTION("units behind an inactive ReLU get exactly zero") {
    // Odd units are off: conv channel 1 (its mask applied by the average pool) and the odd
    // rows of the hidden linear layer (masked by the layer itself).
    const auto& t = f.model->named_params();
    for (std::int64_t k = 0; k < 9; ++k) CHECK(g[static_cast<std::size_t>(t[0].offset + 9 + k)] == 0.0);
    CHECK(g[static_cast<std::size_t>(t[1].offset + 1)] == 0.0);
    for (std::int64_t r = 1; r < 8; r += 2) {
      for (std::int64_t c = 0; c < 12; ++c)
        CHECK(g[static_cast<std::size_t>(t[2].offset + r * 12 + c)] == 0.0);
      CHECK(g[static_cast<std::size_t>(t[3].offset + r)] == 0.0);
    }
  }

  SECTION("along the gradient") {
    // Every parameter at once: the slope along v = g / |g| is g . v = |g|, the check
    // with the largest signal; the rounded step p+ - p- stands in for 2 eps v.
    double norm = 0;
    for (double x : g) norm += x * x;
    norm = std::sqrt(norm);
    std::vector<float> plus = f.p0, minus = f.p0;
    for (std::size_t i = 0; i < g.size(); ++i) {
      plus[i] = static_cast<float>(double(f.p0[i]) + kEps * g[i] / norm);
      minus[i] = static_cast<float>(double(f.p0[i]) - kEps * g[i] / norm);
    }
    double slope = 0;  // g . (p+ - p-) / (2 eps)
    for (std::size_t i = 0; i < g.size(); ++i) slope += g[i] * (double(plus[i]) - double(minus[i]));
    slope /= 2 * kEps;
    const double lp = f.loss_at(plus), lm = f.loss_at(minus);
    INFO("|g| " << norm << ", slope " << slope << ", finite difference " << (lp - lm) / (2 * kEps));
    CHECK(matches(lp, lm, 2 * kEps, slope));
  }
}
