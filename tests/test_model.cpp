// The model library end to end: the zoo, fingerprints, seeded initialisation, the fused
// and unfused code paths, the multi-threaded Trainer, bit-identical determinism, and
// that a small model actually learns the synthetic data.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <regex>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/rng.hpp"
#include "kernels/cpu/gemm.hpp"
#include "model/data/dataset.hpp"
#include "model/layers/conv2d.hpp"
#include "model/layers/elementwise.hpp"
#include "model/layers/linear.hpp"
#include "model/layers/pool2d.hpp"
#include "model/model.hpp"
#include "model/optim/optimizer.hpp"
#include "model/trainer.hpp"
#include "model/zoo.hpp"

using namespace hearsay;

namespace {

constexpr std::int64_t kLenetParams = 129068;  // documented in model/zoo.hpp
constexpr std::int64_t kMlpParams = 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10;

// Parallelism is over the batch (as in `hearsay train`); OpenBLAS threads nested inside
// the Trainer's threads would only oversubscribe the cores.
void single_threaded_blas() { cpu::set_blas_threads(1); }

template <class... L>
std::vector<std::unique_ptr<Layer>> layers(L&&... l) {
  std::vector<std::unique_ptr<Layer>> v;
  (v.push_back(std::make_unique<std::decay_t<L>>(std::forward<L>(l))), ...);
  return v;
}

// LeNet as in the zoo, built by hand; max_pool swaps both average pools for max pools
// (same shapes, same parameter count, different function).
std::unique_ptr<Model> hand_built_lenet(bool max_pool) {
  auto v = max_pool ? layers(Conv2d(1, 20, 3), ReLU(), MaxPool2d(2), Conv2d(20, 50, 5), ReLU(), MaxPool2d(2),
                             Flatten(), Linear(800, 128), ReLU(), Linear(128, 10, Init::xavier_uniform))
                    : layers(Conv2d(1, 20, 3), ReLU(), AvgPool2d(2), Conv2d(20, 50, 5), ReLU(), AvgPool2d(2),
                             Flatten(), Linear(800, 128), ReLU(), Linear(128, 10, Init::xavier_uniform));
  return std::make_unique<Model>("lenet", Shape{1, 28, 28}, 10, std::move(v));
}

std::vector<float> copy_of(std::span<const float> s) { return {s.begin(), s.end()}; }

// max_i |a_i - b_i| / max_i |b_i|: the error relative to the scale of the whole vector.
// Per-element relative error is meaningless for gradient entries that are sums of terms
// cancelling to (almost) zero, where any change of summation order changes the last bits.
double rel_diff(std::span<const float> a, std::span<const float> b) {
  REQUIRE(a.size() == b.size());
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  REQUIRE(scale > 0);
  return diff / scale;
}

bool bit_identical(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

// Random inputs in [0, 1) and labels in [0, classes).
struct Batch {
  std::vector<float> x;
  std::vector<std::uint8_t> y;
};
Batch random_batch(const Model& m, std::int64_t n, std::uint64_t seed) {
  Rng rng(seed);
  Batch b;
  b.x.resize(static_cast<std::size_t>(n * m.input_floats()));
  for (auto& v : b.x) v = static_cast<float>(rng.uniform());
  b.y.resize(static_cast<std::size_t>(n));
  for (auto& v : b.y) v = static_cast<std::uint8_t>(rng.below(static_cast<std::uint64_t>(m.classes())));
  return b;
}

double mean(std::span<const float> v) {
  double s = 0;
  for (float x : v) s += x;
  return s / static_cast<double>(v.size());
}

double stddev(std::span<const float> v) {
  const double mu = mean(v);
  double s = 0;
  for (float x : v) s += (x - mu) * (x - mu);
  return std::sqrt(s / static_cast<double>(v.size()));
}

}  // namespace

TEST_CASE("zoo: parameter counts and architectures", "[model]") {
  auto lenet = make_model("lenet");
  auto mlp = make_model("mlp");
  CHECK(lenet->param_count() == kLenetParams);
  CHECK(mlp->param_count() == kMlpParams);
  CHECK(lenet->params().size() == static_cast<std::size_t>(kLenetParams));
  CHECK(lenet->grads().size() == static_cast<std::size_t>(kLenetParams));
  CHECK(lenet->name() == "lenet");
  CHECK(mlp->name() == "mlp");
  CHECK(lenet->classes() == 10);
  CHECK(lenet->input_floats() == 28 * 28);
  CHECK(mlp->input_floats() == 28 * 28);
  // The architecture text is hashed into the fingerprint peers compare, so it is part of
  // the wire protocol: a change here breaks mixing with older peers.
  CHECK(mlp->architecture() == "in[784] linear(784,256) relu linear(256,128) relu linear(128,10) -> 10");
  CHECK(
      lenet->architecture() ==
      "in[1,28,28] conv2d(1,20,k3,s1,p0) relu avgpool2d(k2,s2) conv2d(20,50,k5,s1,p0) relu avgpool2d(k2,s2) "
      "flatten linear(800,128) relu linear(128,10) -> 10");
  // Fusion changes the code path, not the architecture.
  CHECK(make_model("lenet", false)->architecture() == lenet->architecture());
  CHECK(lenet->is_fused_away(1));
  CHECK_FALSE(make_model("lenet", false)->is_fused_away(1));

  const auto names = model_names();
  CHECK(std::find(names.begin(), names.end(), "mlp") != names.end());
  CHECK(std::find(names.begin(), names.end(), "lenet") != names.end());
  for (const auto& n : names) CHECK(make_model(n)->name() == n);
}

TEST_CASE("zoo: every row builds its model, and its description states the parameter count", "[model]") {
  for (const auto& entry : registered_models()) {
    INFO(entry.name);
    const auto model = entry.make(true);
    CHECK(model->name() == entry.name);
    // The count as --help shows it, with thousands separators: "(129,068 parameters)".
    std::string digits = std::to_string(model->param_count()), grouped;
    for (std::size_t i = 0; i < digits.size(); ++i) {
      if (i > 0 && (digits.size() - i) % 3 == 0) grouped += ',';
      grouped += digits[i];
    }
    CHECK_THAT(std::string(entry.description), Catch::Contains("(" + grouped + " parameters)"));
    // Each layer says which op runs it, and every op of the model is one the CPU runs.
    for (const auto& layer : model->layers()) CHECK(std::string(op_name(layer->op())) != "?");
  }
}

TEST_CASE("zoo: an unknown model name throws and names the known models", "[model]") {
  REQUIRE_THROWS_AS(make_model("resnet"), std::invalid_argument);
  REQUIRE_THROWS_WITH(make_model("resnet"),
                      Catch::Contains("resnet") && Catch::Contains("mlp") && Catch::Contains("lenet"));
  REQUIRE_THROWS_AS(make_model(""), std::invalid_argument);
  REQUIRE_THROWS_AS(make_model("LeNet"), std::invalid_argument);  // names are case-sensitive
}

TEST_CASE("fingerprint: stable format, equal for equal architectures, different otherwise", "[model]") {
  const std::string lenet = make_model("lenet")->fingerprint();
  const std::string mlp = make_model("mlp")->fingerprint();
  CHECK(std::regex_match(lenet, std::regex("lenet-129068-[0-9a-f]{16}")));
  CHECK(std::regex_match(mlp, std::regex("mlp-" + std::to_string(kMlpParams) + "-[0-9a-f]{16}")));
  CHECK(make_model("lenet")->fingerprint() == lenet);
  CHECK(make_model("mlp")->fingerprint() == mlp);
  CHECK(lenet != mlp);
  // The parameters do not enter the fingerprint, only the architecture.
  auto a = make_model("lenet");
  a->init(123);
  CHECK(a->fingerprint() == lenet);
  // Nor does fusion.
  CHECK(make_model("lenet", false)->fingerprint() == lenet);

  // The same layers built by hand give the same fingerprint...
  auto same = hand_built_lenet(false);
  CHECK(same->fingerprint() == lenet);
  // ...and one layer swapped gives a different one although the name and parameter count
  // (the visible parts of the fingerprint) are equal: only the hash tells them apart.
  auto maxpool = hand_built_lenet(true);
  REQUIRE(maxpool->param_count() == kLenetParams);
  CHECK(maxpool->fingerprint() != lenet);
  CHECK(maxpool->fingerprint().substr(0, 13) == lenet.substr(0, 13));  // "lenet-129068-"
}

TEST_CASE("init: seeded, reproducible, Kaiming scale, zero biases", "[model]") {
  auto a = make_model("lenet");
  auto b = make_model("lenet");
  auto c = make_model("lenet");
  a->init(42);
  b->init(42);
  c->init(43);
  CHECK(bit_identical(a->params(), b->params()));
  CHECK_FALSE(bit_identical(a->params(), c->params()));
  std::size_t differ = 0, nonzero = 0;
  for (std::size_t i = 0; i < a->params().size(); ++i) {
    differ += a->params()[i] != c->params()[i];
    nonzero += a->params()[i] != 0.0f;
  }
  // Only the biases (20 + 50 + 128 + 10 = 208) are zero for both seeds.
  CHECK(nonzero == static_cast<std::size_t>(kLenetParams - 208));
  CHECK(differ == nonzero);
  // Re-initialising overwrites everything: init(42) after init(43) equals init(42).
  c->init(42);
  CHECK(bit_identical(a->params(), c->params()));

  // A wide layer, so that the sample standard deviation is accurate to well under 1%.
  // Kaiming (He et al. 2015) with the ReLU gain: Var = 2 / fan_in, for the uniform variant
  // through the bound sqrt(6 / fan_in) (variance bound^2 / 3) and for the normal directly.
  const int fan_in = 1000, fan_out = 400;
  const double expected = std::sqrt(2.0 / fan_in);
  for (Init scheme : {Init::kaiming_uniform, Init::kaiming_normal}) {
    INFO(init_name(scheme));
    Model m("wide", Shape{fan_in}, fan_out, layers(Linear(fan_in, fan_out, scheme)));
    for (auto& p : m.params()) p = 1.0f;  // so that "biases zero" is init's doing
    m.init(7);
    const auto all = m.params();
    const auto w = all.first(static_cast<std::size_t>(fan_in) * fan_out);
    const auto bias = all.subspan(w.size());
    REQUIRE(bias.size() == static_cast<std::size_t>(fan_out));
    CHECK(std::abs(mean(w)) < 0.05 * expected);
    CHECK(stddev(w) == Approx(expected).epsilon(0.10));
    CHECK(std::all_of(bias.begin(), bias.end(), [](float v) { return v == 0.0f; }));
    if (scheme == Init::kaiming_uniform) {
      const double bound = std::sqrt(6.0 / fan_in);
      CHECK(std::all_of(w.begin(), w.end(), [&](float v) { return std::abs(v) <= bound; }));
    }
  }
}

TEST_CASE("fused and unfused LeNet compute the same logits and gradient", "[model]") {
  single_threaded_blas();
  auto fused = make_model("lenet", true);
  auto plain = make_model("lenet", false);
  fused->init(3);
  std::copy(fused->params().begin(), fused->params().end(), plain->params().begin());
  const std::int64_t n = 16;
  const Batch batch = random_batch(*fused, n, 11);

  Workspace wf(*fused, n), wp(*plain, n);
  const ConstTensorView lf = wf.forward(batch.x.data(), n, Pass::train);
  const ConstTensorView lp = wp.forward(batch.x.data(), n, Pass::train);
  REQUIRE(lf.shape == Shape{n, 10});
  REQUIRE(lp.shape == Shape{n, 10});
  const std::span<const float> logits_f(lf.data, static_cast<std::size_t>(lf.numel()));
  const std::span<const float> logits_p(lp.data, static_cast<std::size_t>(lp.numel()));
  CHECK(rel_diff(logits_f, logits_p) <= 1e-5);

  // The gradient through the Trainer (one thread: no summation-order difference).
  Trainer tf(*fused, 1, n), tp(*plain, 1, n);
  const BatchStats sf = tf.compute_gradients(batch.x.data(), batch.y.data(), n);
  const BatchStats sp = tp.compute_gradients(batch.x.data(), batch.y.data(), n);
  CHECK(sf.loss_sum == Approx(sp.loss_sum).epsilon(1e-5));
  CHECK(sf.correct == sp.correct);
  CHECK(rel_diff(fused->grads(), plain->grads()) <= 1e-5);
  // The comparison is not vacuous: every weight layer receives some gradient. (Not all of
  // it: hidden units whose ReLU is off for the whole batch get none.)
  for (const auto& layer : fused->layers()) {
    if (layer->param_count() == 0) continue;
    const auto g = fused->grads().subspan(static_cast<std::size_t>(layer->param_offset()),
                                          static_cast<std::size_t>(layer->param_count()));
    INFO(layer->describe());
    CHECK(std::any_of(g.begin(), g.end(), [](float v) { return v != 0.0f; }));
  }
}

TEST_CASE("Trainer: 1, 2 and 3 threads give the same loss and gradient", "[model]") {
  single_threaded_blas();
  auto model = make_model("lenet");
  model->init(5);
  const std::int64_t n = 37;  // chunks 19/18 and 13/12/12: uneven
  const Batch batch = random_batch(*model, n, 17);

  std::vector<BatchStats> stats;
  std::vector<std::vector<float>> grads;
  for (int threads : {1, 2, 3}) {
    Trainer trainer(*model, threads, n);
    REQUIRE(trainer.threads() == threads);
    stats.push_back(trainer.compute_gradients(batch.x.data(), batch.y.data(), n));
    grads.push_back(copy_of(model->grads()));
  }
  // Each thread sums the gradient of its own chunk, and the per-thread sums are then added
  // in order 0..T-1, so the floating-point summation order (and only that) depends on T:
  // equal up to rounding, not bit for bit. Likewise the loss is summed per chunk.
  for (std::size_t i = 1; i < stats.size(); ++i) {
    INFO("threads " << i + 1 << " vs 1");
    CHECK(stats[i].count == n);
    CHECK(stats[i].correct == stats[0].correct);
    CHECK(stats[i].loss_sum == Approx(stats[0].loss_sum).epsilon(1e-5));
    CHECK(rel_diff(grads[i], grads[0]) <= 1e-5);
  }
  // The loss is a mean over 37 examples of an untrained 10-class model: about ln 10.
  CHECK(stats[0].mean_loss() > 1.0);
  CHECK(stats[0].mean_loss() < 5.0);
}

TEST_CASE("Trainer: a batch smaller than the thread count leaves threads idle but is still right",
          "[model]") {
  single_threaded_blas();
  auto model = make_model("lenet");
  model->init(5);
  const std::int64_t n = 37, small = 2;
  const Batch batch = random_batch(*model, n, 17);
  Trainer one(*model, 1, n);
  const BatchStats s1 = one.compute_gradients(batch.x.data(), batch.y.data(), small);
  const std::vector<float> g1 = copy_of(model->grads());
  Trainer three(*model, 3, n);
  // A full batch first, so that the per-thread buffer of the thread that gets an empty chunk
  // next holds a stale gradient: it must contribute zero, not what it had.
  three.compute_gradients(batch.x.data(), batch.y.data(), n);
  const BatchStats s3 = three.compute_gradients(batch.x.data(), batch.y.data(), small);
  CHECK(s3.count == small);
  CHECK(s3.correct == s1.correct);
  CHECK(s3.loss_sum == Approx(s1.loss_sum).epsilon(1e-5));
  CHECK(rel_diff(model->grads(), g1) <= 1e-5);
  // One example on three threads: two idle threads.
  const BatchStats s31 = three.compute_gradients(batch.x.data(), batch.y.data(), 1);
  CHECK(s31.count == 1);
  one.compute_gradients(batch.x.data(), batch.y.data(), 1);
  const std::vector<float> g11 = copy_of(model->grads());
  three.compute_gradients(batch.x.data(), batch.y.data(), 1);
  CHECK(rel_diff(model->grads(), g11) <= 1e-5);
}

TEST_CASE("30 SGD steps of LeNet are bit-identical for the same seed", "[model]") {
  single_threaded_blas();
  const Dataset data = synthetic_dataset(512, 1);
  const std::int64_t batch = 16, steps = 30;

  struct Run {
    std::vector<double> losses;
    std::vector<float> params;
  };
  auto train = [&](std::uint64_t seed) {
    auto model = make_model("lenet");
    model->init(seed);
    Trainer trainer(*model, 2, batch);
    auto sgd = make_sgd(static_cast<std::size_t>(model->param_count()), SgdOptions{.momentum = 0.9f});
    Rng pick(seed ^ 0xba7c4ULL);
    std::vector<float> x(static_cast<std::size_t>(batch * data.pixels()));
    std::vector<std::uint8_t> y(static_cast<std::size_t>(batch));
    Run run;
    for (std::int64_t step = 0; step < steps; ++step) {
      for (std::int64_t i = 0; i < batch; ++i) {
        const auto idx = static_cast<std::int64_t>(pick.below(static_cast<std::uint64_t>(data.count)));
        std::copy_n(data.image(idx), data.pixels(), x.data() + i * data.pixels());
        y[static_cast<std::size_t>(i)] = data.labels[static_cast<std::size_t>(idx)];
      }
      run.losses.push_back(trainer.compute_gradients(x.data(), y.data(), batch).mean_loss());
      sgd->step(model->params(), model->grads(), 0.05f);
    }
    run.params = copy_of(model->params());
    return run;
  };

  const Run a = train(9), b = train(9), c = train(10);
  REQUIRE(a.losses.size() == static_cast<std::size_t>(steps));
  for (std::size_t i = 0; i < a.losses.size(); ++i) {
    INFO("step " << i);
    CHECK(a.losses[i] == b.losses[i]);  // exact: same seed and thread count
  }
  CHECK(bit_identical(a.params, b.params));
  CHECK(a.losses != c.losses);
  CHECK_FALSE(bit_identical(a.params, c.params));
  // And the steps did something: the parameters moved and the loss is finite.
  auto init = make_model("lenet");
  init->init(9);
  CHECK_FALSE(bit_identical(a.params, init->params()));
  CHECK(std::all_of(a.losses.begin(), a.losses.end(), [](double l) { return std::isfinite(l); }));
}

TEST_CASE("the MLP learns the synthetic data", "[model]") {
  single_threaded_blas();
  const Dataset train = synthetic_dataset(2000, 1);
  const Dataset test = synthetic_dataset(500, 2);
  auto model = make_model("mlp");
  model->init(1);
  const std::int64_t batch = 32;
  Trainer trainer(*model, 2, batch);
  const BatchStats before = trainer.evaluate(test.images.data(), test.labels.data(), test.count);
  REQUIRE(before.count == test.count);
  CHECK(before.accuracy() < 0.4);  // 10 classes: chance is 0.1

  auto sgd = make_sgd(static_cast<std::size_t>(model->param_count()), SgdOptions{.momentum = 0.9f});
  std::vector<std::int64_t> order(static_cast<std::size_t>(train.count));
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int64_t>(i);
  Rng rng(4);
  std::vector<float> x(static_cast<std::size_t>(batch * train.pixels()));
  std::vector<std::uint8_t> y(static_cast<std::size_t>(batch));
  // lr 0.02, 4 epochs: test accuracy 0.998 for init seeds 1, 2, 3 when measured; lr 0.05
  // gets there too but with dips (0.89 at epoch 3), so the threshold keeps a wide margin.
  for (int epoch = 0; epoch < 4; ++epoch) {
    rng.shuffle(order.begin(), order.end());
    for (std::int64_t first = 0; first < train.count; first += batch) {
      const std::int64_t n = std::min(batch, train.count - first);
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t idx = order[static_cast<std::size_t>(first + i)];
        std::copy_n(train.image(idx), train.pixels(), x.data() + i * train.pixels());
        y[static_cast<std::size_t>(i)] = train.labels[static_cast<std::size_t>(idx)];
      }
      trainer.compute_gradients(x.data(), y.data(), n);
      sgd->step(model->params(), model->grads(), 0.02f);
    }
  }
  const BatchStats after = trainer.evaluate(test.images.data(), test.labels.data(), test.count);
  INFO("test accuracy " << before.accuracy() << " -> " << after.accuracy() << ", loss " << before.mean_loss()
                        << " -> " << after.mean_loss());
  CHECK(after.count == test.count);
  CHECK(after.accuracy() > 0.9);
  CHECK(after.mean_loss() < before.mean_loss() / 2);
}

TEST_CASE("batch sizes outside the workspace or trainer limits throw", "[model]") {
  auto model = make_model("mlp");
  model->init(0);
  const Batch batch = random_batch(*model, 9, 1);
  Workspace ws(*model, 8);
  CHECK(ws.max_batch() == 8);
  CHECK_NOTHROW(ws.forward(batch.x.data(), 8, Pass::train));
  CHECK_THROWS_AS(ws.forward(batch.x.data(), 9, Pass::train), std::invalid_argument);
  CHECK_THROWS_AS(ws.forward(batch.x.data(), -1, Pass::train), std::invalid_argument);
  CHECK_THROWS_AS(Workspace(*model, 0), std::invalid_argument);

  Trainer trainer(*model, 2, 8);
  CHECK_THROWS_AS(trainer.compute_gradients(batch.x.data(), batch.y.data(), 0), std::invalid_argument);
  CHECK_THROWS_AS(trainer.compute_gradients(batch.x.data(), batch.y.data(), 9), std::invalid_argument);
  CHECK_THROWS_AS(trainer.compute_gradients(batch.x.data(), batch.y.data(), -3), std::invalid_argument);
  CHECK(trainer.compute_gradients(batch.x.data(), batch.y.data(), 8).count == 8);
  CHECK_THROWS_AS(Trainer(*model, 1, 0), std::invalid_argument);
}

TEST_CASE("training FLOPs per example", "[model]") {
  // LeNet by hand, multiply-adds (MACs) per example of each weight layer, 2 FLOPs per MAC,
  // and three products per layer in training (forward, input gradient, weight gradient)
  // except the first layer, whose input gradient is not needed:
  //   conv 1->20 k3 on 28x28 -> 26x26: 20*9*676       =   121,680 MACs x 2 x 2 =    486,720
  //   avgpool -> 13x13; conv 20->50 k5 -> 9x9: 50*500*81 = 2,025,000 MACs x 2 x 3 = 12,150,000
  //   avgpool -> 4x4, flatten 800; linear 800->128      =   102,400 MACs x 2 x 3 =    614,400
  //   linear 128->10                                     =     1,280 MACs x 2 x 3 =      7,680
  //   total 13,258,800 FLOPs, the "about 13.3 MFLOP per sample" of the issue. (Pools, ReLU,
  //   bias and softmax are O(activations), a few tens of kFLOP, and not counted.)
  const double lenet = make_model("lenet")->train_flops_per_example();
  CHECK(lenet >= 13.0e6);
  CHECK(lenet <= 13.6e6);
  CHECK(lenet == Approx(13'258'800.0));
  // MLP: 784*256 MACs x 2 x 2 + (256*128 + 128*10) MACs x 2 x 3.
  CHECK(make_model("mlp")->train_flops_per_example() ==
        Approx(784.0 * 256 * 4 + (256.0 * 128 + 128 * 10) * 6));
}
