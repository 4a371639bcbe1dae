// ResNet's layers against double-precision references written from the definitions:
// BatchNorm2d (training and evaluation passes, running statistics), convolutions without
// bias, global average pooling and the BasicBlock made of them; then the resnet20 model's
// layout, its checkpoints and a few training steps.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <vector>

#include "layer_check.hpp"
#include "model/checkpoint.hpp"
#include "model/layers/batchnorm2d.hpp"
#include "model/layers/conv2d.hpp"
#include "model/layers/elementwise.hpp"
#include "model/layers/linear.hpp"
#include "model/layers/pool2d.hpp"
#include "model/layers/residual.hpp"
#include "model/model.hpp"
#include "model/optim/optimizer.hpp"
#include "model/trainer.hpp"
#include "model/training_session.hpp"
#include "model/zoo.hpp"

using namespace hearsay;
using namespace hearsay::testing;
using reference::Vec;

namespace {

constexpr double kEps = 1e-5;

// y = gamma (x - mean) / sqrt(var + eps) + beta per channel of x [n, c, pixels]; p = gamma
// [c] then beta [c]. Training: the batch's mean and biased variance; evaluation: the given
// running statistics.
Vec batchnorm(const Vec& p, const Vec& x, int n, int c, int pixels, const Vec* running_mean = nullptr,
              const Vec* running_var = nullptr) {
  Vec y(x.size());
  for (int ch = 0; ch < c; ++ch) {
    double mean = 0, var = 0;
    if (running_mean) {
      mean = (*running_mean)[static_cast<std::size_t>(ch)];
      var = (*running_var)[static_cast<std::size_t>(ch)];
    } else {
      for (int i = 0; i < n; ++i)
        for (int k = 0; k < pixels; ++k) mean += x[(static_cast<std::size_t>(i) * c + ch) * pixels + k];
      mean /= n * pixels;
      for (int i = 0; i < n; ++i)
        for (int k = 0; k < pixels; ++k) {
          const double d = x[(static_cast<std::size_t>(i) * c + ch) * pixels + k] - mean;
          var += d * d;
        }
      var /= n * pixels;
    }
    const double gamma = p[static_cast<std::size_t>(ch)], beta = p[static_cast<std::size_t>(c + ch)];
    for (int i = 0; i < n; ++i)
      for (int k = 0; k < pixels; ++k) {
        const std::size_t at = (static_cast<std::size_t>(i) * c + ch) * pixels + k;
        y[at] = gamma * (x[at] - mean) / std::sqrt(var + kEps) + beta;
      }
  }
  return y;
}

// A convolution without bias: the reference's with a zero bias appended.
Vec conv_nobias(const Vec& w, const Vec& x, int n, int c, int h, int wd, int oc, int k, int stride, int pad) {
  Vec p = w;
  p.resize(p.size() + static_cast<std::size_t>(oc), 0.0);
  return reference::conv2d(p, x, n, c, h, wd, oc, k, stride, pad);
}

Vec slice(const Vec& p, std::size_t& at, std::size_t count) {
  Vec s(p.begin() + static_cast<std::ptrdiff_t>(at), p.begin() + static_cast<std::ptrdiff_t>(at + count));
  at += count;
  return s;
}

// BasicBlock(cin, cout, stride) in training mode; p in the block's parameter order.
Vec basic_block(const Vec& p, const Vec& x, int n, int cin, int h, int w, int cout, int stride) {
  const int oh = (h + 2 - 3) / stride + 1, ow = (w + 2 - 3) / stride + 1, pixels = oh * ow;
  const bool projects = stride != 1 || cin != cout;
  std::size_t at = 0;
  const Vec w1 = slice(p, at, static_cast<std::size_t>(cout) * cin * 9);
  const Vec bn1 = slice(p, at, 2 * static_cast<std::size_t>(cout));
  const Vec w2 = slice(p, at, static_cast<std::size_t>(cout) * cout * 9);
  const Vec bn2 = slice(p, at, 2 * static_cast<std::size_t>(cout));
  const Vec b1 =
      reference::relu(batchnorm(bn1, conv_nobias(w1, x, n, cin, h, w, cout, 3, stride, 1), n, cout, pixels));
  Vec y = batchnorm(bn2, conv_nobias(w2, b1, n, cout, oh, ow, cout, 3, 1, 1), n, cout, pixels);
  Vec shortcut = x;
  if (projects) {
    const Vec ws = slice(p, at, static_cast<std::size_t>(cout) * cin);
    const Vec bns = slice(p, at, 2 * static_cast<std::size_t>(cout));
    shortcut = batchnorm(bns, conv_nobias(ws, x, n, cin, h, w, cout, 1, stride, 0), n, cout, pixels);
  }
  REQUIRE(at == p.size());
  for (std::size_t i = 0; i < y.size(); ++i) y[i] += shortcut[i];
  return reference::relu(y);
}

}  // namespace

TEST_CASE("BatchNorm2d's training pass matches the reference for odd sizes and batch 1",
          "[layers][gradcheck][resnet]") {
  struct Case {
    int n, c, h, w;
  };
  for (const auto& s : {Case{2, 3, 4, 5}, Case{1, 4, 3, 3}, Case{3, 5, 7, 1}, Case{4, 2, 1, 1}}) {
    for (bool fused : {false, true}) {
      BatchNorm2d layer(s.c);
      layer.set_fused_relu(fused);
      RefForward ref = [s](const Vec& p, const Vec& x) { return batchnorm(p, x, s.n, s.c, s.h * s.w); };
      if (fused) ref = [ref](const Vec& p, const Vec& x) { return reference::relu(ref(p, x)); };
      check_layer(layer, Shape{s.n, s.c, s.h, s.w}, ref, 61);
    }
  }
}

TEST_CASE("BatchNorm2d's evaluation pass uses the running statistics", "[layers][gradcheck][resnet]") {
  const int n = 2, c = 3, h = 5, w = 3;
  Vec mean{0.5, -1.0, 2.0}, var{0.25, 3.0, 1.5};
  BatchNorm2d layer(c);
  auto set = [&](float* buffers) {
    for (int i = 0; i < c; ++i) {
      buffers[i] = static_cast<float>(mean[static_cast<std::size_t>(i)]);
      buffers[c + i] = static_cast<float>(var[static_cast<std::size_t>(i)]);
    }
  };
  check_layer(
      layer, Shape{n, c, h, w},
      [&](const Vec& p, const Vec& x) { return batchnorm(p, x, n, c, h * w, &mean, &var); }, 62, Pass::eval,
      set);
}

TEST_CASE("BatchNorm2d updates its running statistics as PyTorch does", "[layers][resnet]") {
  const int n = 3, c = 2, h = 2, w = 2, m = n * h * w;
  BatchNorm2d layer(c);
  std::vector<float> state(static_cast<std::size_t>(layer.param_count() + layer.buffer_count()));
  layer.bind(state.data(), 0, layer.param_count());
  Rng rng(5);
  layer.init_params(rng);
  layer.init_buffers();
  REQUIRE(layer.running_var()[0] == 1.0f);
  std::vector<float> x(static_cast<std::size_t>(n * c * h * w)), y(x.size());
  for (auto& v : x) v = static_cast<float>(rng.normal() * 2 + 1);
  std::vector<float> scratch(static_cast<std::size_t>(layer.scratch_floats(Shape{n, c, h, w})));
  const Shape shape{n, c, h, w};

  layer.forward(ConstTensorView{x.data(), shape}, TensorView{y.data(), shape}, scratch.data(),
                Pass::train_replica);
  CHECK(layer.running_mean()[1] == 0.0f);  // a replica leaves them alone
  CHECK(*layer.batches_tracked() == 0.0f);

  for (int step = 1; step <= 2; ++step) {
    std::vector<double> expect_mean(c), expect_var(c);
    for (int ch = 0; ch < c; ++ch) {
      double sum = 0, sq = 0;
      for (int i = 0; i < n; ++i)
        for (int k = 0; k < h * w; ++k) sum += x[static_cast<std::size_t>((i * c + ch) * h * w + k)];
      const double mu = sum / m;
      for (int i = 0; i < n; ++i)
        for (int k = 0; k < h * w; ++k) {
          const double d = x[static_cast<std::size_t>((i * c + ch) * h * w + k)] - mu;
          sq += d * d;
        }
      // momentum 0.1 and the unbiased variance, sum / (M - 1)
      expect_mean[static_cast<std::size_t>(ch)] = 0.9 * layer.running_mean()[ch] + 0.1 * mu;
      expect_var[static_cast<std::size_t>(ch)] = 0.9 * layer.running_var()[ch] + 0.1 * sq / (m - 1);
    }
    layer.forward(ConstTensorView{x.data(), shape}, TensorView{y.data(), shape}, scratch.data(), Pass::train);
    for (int ch = 0; ch < c; ++ch) {
      CHECK(layer.running_mean()[ch] == Approx(expect_mean[static_cast<std::size_t>(ch)]).epsilon(1e-5));
      CHECK(layer.running_var()[ch] == Approx(expect_var[static_cast<std::size_t>(ch)]).epsilon(1e-5));
    }
    CHECK(*layer.batches_tracked() == static_cast<float>(step));
  }
  // A training pass of one value per channel has no variance to normalise with.
  const Shape single{1, c, 1, 1};
  CHECK_THROWS_AS(layer.forward(ConstTensorView{x.data(), single}, TensorView{y.data(), single},
                                scratch.data(), Pass::train),
                  std::invalid_argument);
}

TEST_CASE("Conv2d without bias and global average pooling match the reference",
          "[layers][gradcheck][resnet]") {
  struct Geometry {
    int c, h, w, oc, k, stride, pad;
  };
  // ResNet's 3x3 stride 1 and 2 with padding 1, 1x1 stride 2, on odd sizes.
  for (const auto& g : {Geometry{3, 7, 7, 4, 3, 1, 1}, Geometry{2, 9, 7, 3, 3, 2, 1},
                        Geometry{3, 7, 5, 4, 1, 2, 0}, Geometry{8, 6, 6, 5, 3, 1, 1}}) {
    Conv2d layer(g.c, g.oc, g.k, g.stride, g.pad, Init::kaiming_normal, Conv2d::Bias::without);
    REQUIRE(layer.param_count() == static_cast<std::int64_t>(g.oc) * g.c * g.k * g.k);
    check_layer(
        layer, Shape{1, g.c, g.h, g.w},
        [g](const Vec& p, const Vec& x) {
          return conv_nobias(p, x, 1, g.c, g.h, g.w, g.oc, g.k, g.stride, g.pad);
        },
        63);
  }
  GlobalAvgPool2d pool;
  check_layer(
      pool, Shape{2, 3, 5, 7},
      [](const Vec&, const Vec& x) {
        Vec y(6, 0.0);
        for (std::size_t i = 0; i < x.size(); ++i) y[i / 35] += x[i] / 35;
        return y;
      },
      64);
}

TEST_CASE("BasicBlock matches the reference with identity and projection shortcuts",
          "[layers][gradcheck][resnet]") {
  struct Case {
    int n, cin, h, w, cout, stride;
  };
  for (const auto& s :
       {Case{2, 3, 5, 5, 3, 1}, Case{1, 2, 7, 7, 4, 2}, Case{2, 3, 6, 5, 5, 1}, Case{1, 4, 4, 4, 4, 1}}) {
    BasicBlock block(s.cin, s.cout, s.stride);
    CHECK(block.projects() == (s.stride != 1 || s.cin != s.cout));
    check_layer(
        block, Shape{s.n, s.cin, s.h, s.w},
        [s](const Vec& p, const Vec& x) { return basic_block(p, x, s.n, s.cin, s.h, s.w, s.cout, s.stride); },
        65);
  }
}

TEST_CASE("resnet20 has ResNet-20's layout under the PyTorch reference's names", "[model][resnet]") {
  const auto model = make_model("resnet20");
  CHECK(model->param_count() == 272186);
  // 21 BatchNorms: running mean and variance per channel (784 channels) and a counter each.
  CHECK(model->buffer_count() == 2 * 784 + 21);
  CHECK(model->state_count() == model->param_count() + model->buffer_count());
  CHECK(model->named_params().size() + model->named_buffers().size() == 128);
  CHECK(model->shape_after(-1, 4).str() == "[4,1,28,28]");
  CHECK(model->shape_after(5, 4).str() == "[4,16,28,28]");
  CHECK(model->shape_after(8, 4).str() == "[4,32,14,14]");
  CHECK(model->shape_after(11, 4).str() == "[4,64,7,7]");
  auto find = [&](const std::string& name) -> const NamedTensor* {
    for (const auto* list : {&model->named_params(), &model->named_buffers()})
      for (const auto& t : *list)
        if (t.name == name) return &t;
    return nullptr;
  };
  for (const char* name :
       {"0.weight", "1.weight", "1.running_var", "3.conv1.weight", "3.bn2.bias", "6.shortcut.0.weight",
        "6.shortcut.1.running_mean", "9.conv2.weight", "13.weight", "13.bias"})
    CHECK(find(name) != nullptr);
  CHECK(find("0.bias") == nullptr);               // no bias before a BatchNorm
  CHECK(find("3.shortcut.0.weight") == nullptr);  // identity shortcut
  REQUIRE(find("6.shortcut.0.weight"));
  CHECK(find("6.shortcut.0.weight")->shape.str() == "[32,16,1,1]");
  REQUIRE(find("9.bn1.num_batches_tracked"));
  CHECK(find("9.bn1.num_batches_tracked")->is_count);
  CHECK(find("13.weight")->shape.str() == "[10,64]");
  // The buffers come after every parameter: the optimizer's prefix holds no statistics.
  for (const auto& t : model->named_buffers()) CHECK(t.offset >= model->param_count());
}

TEST_CASE("a resnet20 checkpoint keeps the running statistics and counters", "[checkpoint][resnet]") {
  const auto model = make_model("resnet20");
  model->init(3);
  auto state = model->state();
  for (const auto& t : model->named_buffers())
    for (std::int64_t i = 0; i < t.shape.numel(); ++i)  // counters are whole numbers
      state[static_cast<std::size_t>(t.offset + i)] =
          t.is_count ? 1234.0f : static_cast<float>(i % 7) * 0.37f + 0.5f;
  const std::vector<float> saved(model->state().begin(), model->state().end());
  const auto dir =
      std::filesystem::temp_directory_path() / ("hearsay-resnet-ckpt-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto file = dir / "checkpoint.safetensors";
  write_checkpoint(file, *model, TrainingState{});
  const auto other = make_model("resnet20");
  other->init(4);
  read_checkpoint(file, *other);
  const auto restored = other->state();
  REQUIRE(restored.size() == saved.size());
  CHECK(std::equal(saved.begin(), saved.end(), restored.begin()));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a small residual network learns a batch, and evaluates with its running statistics",
          "[model][resnet]") {
  std::vector<std::unique_ptr<Layer>> layers;
  layers.push_back(std::make_unique<Conv2d>(1, 4, 3, 1, 1, Init::kaiming_normal, Conv2d::Bias::without));
  layers.push_back(std::make_unique<BatchNorm2d>(4));
  layers.push_back(std::make_unique<ReLU>());
  layers.push_back(std::make_unique<BasicBlock>(4, 8, 2));
  layers.push_back(std::make_unique<GlobalAvgPool2d>());
  layers.push_back(std::make_unique<Linear>(8, 3));
  Model model("tiny", Shape{1, 8, 8}, 3, std::move(layers));
  CHECK(model.is_fused_away(2));  // the stem's ReLU runs in its BatchNorm
  model.init(9);
  const int n = 12;
  Rng rng(10);
  std::vector<float> x(static_cast<std::size_t>(n * 64));
  std::vector<std::uint8_t> labels(n);
  for (int i = 0; i < n; ++i) {
    labels[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(i % 3);
    for (int k = 0; k < 64; ++k)
      x[static_cast<std::size_t>(i * 64 + k)] =
          static_cast<float>(rng.normal() * 0.5 + (k % 3 == i % 3 ? 1.0 : 0.0));
  }
  Trainer trainer(model, 1, n);
  const double first = trainer.compute_gradients(x.data(), labels.data(), n).mean_loss();
  double last = first;
  for (int step = 0; step < 60; ++step) {
    last = trainer.compute_gradients(x.data(), labels.data(), n).mean_loss();
    auto p = model.params();
    auto g = model.grads();
    for (std::size_t i = 0; i < p.size(); ++i) p[i] -= 0.1f * g[i];
  }
  CHECK(last < 0.5 * first);
  // 61 training passes moved the running statistics away from their start, and the
  // evaluation pass normalises with them: its loss differs from a training pass's.
  CHECK(model.buffers()[0] != 0.0f);
  const auto eval = trainer.evaluate(x.data(), labels.data(), n);
  CHECK(std::isfinite(eval.mean_loss()));
  CHECK(eval.mean_loss() !=
        Approx(trainer.compute_gradients(x.data(), labels.data(), n).mean_loss()).epsilon(1e-9));
}

TEST_CASE("a session's store reaches the running statistics only with mix_buffers", "[model][resnet]") {
  const auto model = make_model("resnet20");
  model->init(1);
  SgdOptions sgd;
  sgd.momentum = 0.9f;
  sgd.weight_decay = 5e-4f;
  const auto optimizer = make_sgd(static_cast<std::size_t>(model->param_count()), sgd);
  for (const bool mix : {true, false}) {
    auto session = make_training_session(Device{}, *model, *optimizer, {1, 4, mix});
    ParameterStore& store = session->parameters();
    CHECK(store.size() == static_cast<std::size_t>(mix ? model->state_count() : model->param_count()));
    std::vector<float> values(store.size());
    store.read(values);
    // The last value the store reaches: the last BatchNorm's counter with mix, the last
    // parameter (the linear layer's last bias) without.
    CHECK(values.back() == model->state()[store.size() - 1]);
  }
  // An optimizer step moves parameters only: weight decay leaves the running variance at 1.
  auto session = make_training_session(Device{}, *model, *optimizer, {1, 4, true});
  const std::vector<float> before(model->buffers().begin(), model->buffers().end());
  std::fill(model->grads().begin(), model->grads().end(), 0.0f);
  session->apply_update(0.1f);
  CHECK(std::equal(before.begin(), before.end(), model->buffers().begin()));
}

TEST_CASE("a workspace's size per example tells resnet20 from LeNet", "[model][resnet]") {
  const auto lenet = make_model("lenet");
  const auto resnet = make_model("resnet20");
  // LeNet's activations are ~30k floats per example; each of resnet20's first three
  // blocks keeps several maps of 16 x 28 x 28 (12,544 floats) for its backward.
  const auto small = lenet->workspace_floats_per_example(), large = resnet->workspace_floats_per_example();
  INFO("lenet " << small << ", resnet20 " << large);
  CHECK(small > 20'000);
  CHECK(large > 10 * small);
  CHECK(resnet->workspace_floats(64) > resnet->workspace_floats(32));
}
