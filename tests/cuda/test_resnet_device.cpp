// The CUDA backend's ResNet layers against the CPU layers: BatchNorm2d through cuDNN in
// training, replica and evaluation passes (outputs, gradients, running statistics and the
// batch counter), global average pooling and the residual sum (bit for bit), and small
// models around a BasicBlock with an identity and a projection shortcut, run by the CUDA
// runner and by the CPU Workspace from the same state.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include "cuda_test_util.hpp"
#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/vector.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/resnet_ops.hpp"
#include "model/cuda/cuda_layer_ops.hpp"
#include "model/cuda/cuda_scratch_layout.hpp"
#include "model/layers/batchnorm2d.hpp"
#include "model/layers/linear.hpp"
#include "model/layers/pool2d.hpp"
#include "model/layers/residual.hpp"
#include "resnet_test_util.hpp"

using namespace hearsay;
using cuda_test::random_normal;
using cuda_test::to_device;
using cuda_test::to_host;

namespace {

// A BatchNorm2d bound to its own state: gamma around 1, beta around 0, and running
// statistics away from their starting values (so that the update and the evaluation pass
// are not tested on zeros and ones only).
struct BnFixture {
  BatchNorm2d bn;
  Shape in;
  std::vector<float> state, x, dy;

  BnFixture(const Shape& shape, std::uint64_t seed) : bn(static_cast<int>(shape[1])), in(shape) {
    const auto c = static_cast<std::size_t>(shape[1]);
    state.resize(static_cast<std::size_t>(bn.param_count() + bn.buffer_count()));
    const auto g = random_normal(4 * c, seed, 0.5f);
    for (std::size_t i = 0; i < c; ++i) {
      state[i] = 1.0f + g[i];                             // gamma
      state[c + i] = g[c + i];                            // beta
      state[2 * c + i] = g[2 * c + i];                    // running mean
      state[3 * c + i] = 0.5f + std::fabs(g[3 * c + i]);  // running variance
    }
    state[4 * c] = 7.0f;  // num_batches_tracked
    bn.bind(state.data(), 0, bn.param_count());
    // Inputs off-centre and scaled, as a convolution's output would be.
    x = random_normal(static_cast<std::size_t>(shape.numel()), seed + 1, 2.0f);
    for (auto& v : x) v += 0.75f;
    dy = random_normal(x.size(), seed + 2);
  }
};

struct BnResult {
  std::vector<float> y, dx, grads, state;
};

// The CPU layer on a copy of the fixture's state.
BnResult cpu_bn(BnFixture& f, Pass pass) {
  BnResult r{std::vector<float>(f.x.size()), std::vector<float>(f.x.size()),
             std::vector<float>(static_cast<std::size_t>(f.bn.param_count())), f.state};
  f.bn.bind(r.state.data(), 0, f.bn.param_count());
  std::vector<float> scratch(static_cast<std::size_t>(f.bn.scratch_floats(f.in)));
  f.bn.forward(ConstTensorView{f.x.data(), f.in}, TensorView{r.y.data(), f.in}, scratch.data(), pass);
  std::vector<float> dy = f.dy;
  if (pass != Pass::eval)
    f.bn.backward(ConstTensorView{f.x.data(), f.in}, ConstTensorView{r.y.data(), f.in},
                  TensorView{dy.data(), f.in}, r.dx.data(), r.grads.data(), scratch.data());
  f.bn.bind(f.state.data(), 0, f.bn.param_count());
  return r;
}

// CudaLayerOps' BatchNorm (the runner's) on an uploaded copy of the fixture's state.
BnResult gpu_bn(const BnFixture& f, Pass pass) {
  cuda::Stream stream;
  CudaLayerOps ops(stream);
  auto state = to_device(f.state), x = to_device(f.x), dy = to_device(f.dy);
  cuda::DeviceBuffer<float> y(f.x.size()), dx(f.x.size()),
      grads(static_cast<std::size_t>(f.bn.param_count()));
  cuda::DeviceBuffer<float> stats(static_cast<std::size_t>(batchnorm_stats_floats(f.bn)));
  HEARSAY_CUDA_CHECK(cudaDeviceSynchronize());  // the uploads ran on the legacy default stream
  ops.batchnorm_forward(f.bn, f.in, state.data(), x.data(), y.data(), stats.data(), pass);
  if (pass != Pass::eval)
    ops.batchnorm_backward(f.bn, f.in, state.data(), x.data(), dy.data(), dx.data(), grads.data(),
                           stats.data(), pass);
  stream.synchronize();
  return {to_host(y), pass == Pass::eval ? std::vector<float>(f.x.size()) : to_host(dx),
          pass == Pass::eval ? std::vector<float>(grads.size()) : to_host(grads), to_host(state)};
}

// Per-element scales of the results, in double from the fixture: the sums of the
// magnitudes of the terms each result is made of (see check_bn).
struct BnScales {
  std::vector<double> y, dx, grads, state;
};

BnScales bn_scales(const BnFixture& f, Pass pass) {
  const auto c = static_cast<std::size_t>(f.in[1]);
  const auto pixels = static_cast<std::size_t>(f.in[2] * f.in[3]), n = static_cast<std::size_t>(f.in[0]);
  const double m = static_cast<double>(n * pixels), momentum = f.bn.momentum();
  auto at = [&](std::size_t i, std::size_t ch, std::size_t k) { return (i * c + ch) * pixels + k; };
  BnScales s{std::vector<double>(f.x.size()), std::vector<double>(f.x.size()), std::vector<double>(2 * c),
             std::vector<double>(f.state.size(), 0.0)};
  for (std::size_t ch = 0; ch < c; ++ch) {
    double mean = 0, var = 0, mean_abs = 0;
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t k = 0; k < pixels; ++k)
        mean += f.x[at(i, ch, k)], mean_abs += std::fabs(f.x[at(i, ch, k)]);
    mean /= m;
    mean_abs /= m;
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t k = 0; k < pixels; ++k) var += (f.x[at(i, ch, k)] - mean) * (f.x[at(i, ch, k)] - mean);
    var /= m;
    if (pass == Pass::eval) mean = f.state[2 * c + ch], var = f.state[3 * c + ch];
    const double invstd = 1.0 / std::sqrt(var + f.bn.eps()), gamma = std::fabs(f.state[ch]);
    double dy_abs = 0, dy_xhat_abs = 0;
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t k = 0; k < pixels; ++k) {
        const std::size_t e = at(i, ch, k);
        const double xhat = (f.x[e] - mean) * invstd;
        s.y[e] = gamma * std::fabs(xhat) + std::fabs(f.state[c + ch]);
        dy_abs += std::fabs(f.dy[e]);
        dy_xhat_abs += std::fabs(f.dy[e] * xhat);
      }
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t k = 0; k < pixels; ++k) {
        const std::size_t e = at(i, ch, k);
        const double xhat = std::fabs((f.x[e] - mean) * invstd);
        s.dx[e] = gamma * invstd * (std::fabs(f.dy[e]) + dy_abs / m + xhat * dy_xhat_abs / m);
      }
    s.grads[ch] = dy_xhat_abs;
    s.grads[c + ch] = dy_abs;
    s.state[2 * c + ch] = (1 - momentum) * std::fabs(f.state[2 * c + ch]) + momentum * mean_abs;
    s.state[3 * c + ch] = (1 - momentum) * f.state[3 * c + ch] + momentum * var * m / std::max(1.0, m - 1);
  }
  return s;
}

// cpu::batchnorm sums each plane (at most H x W = 784 values here) in fp32, whose error is
// at most 784 x 2^-24 ~ 4.7e-5 of the sum of the terms' magnitudes, then the planes in
// double; cuDNN sums in fp32 in its own blocked order, with an error of the same kind. The
// mean, the variance (so 1/std, at half its relative error) and the gradient sums carry
// those errors into every result, each relative to the magnitudes of its own terms: the
// scales of bn_scales. So 1e-4 of the scale bounds the difference, plus 1e-6 of the largest
// scale for results whose terms cancel to nothing; a wrong channel, a missing term or the
// biased variance in the running update (a factor M / (M - 1)) is off by far more.
void check_bn(const char* what, const std::vector<float>& got, const std::vector<float>& want,
              const std::vector<double>& scale) {
  REQUIRE(got.size() == want.size());
  const double largest = *std::max_element(scale.begin(), scale.end());
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(double(got[i]) - double(want[i])) <= 1e-4 * scale[i] + 1e-6 * largest) && bad++ == 0)
      first = i;
  INFO(what << ": " << bad << " of " << got.size() << " outside the bound, first at " << first << " (gpu "
            << got[first] << ", cpu " << want[first] << ", scale " << scale[first] << ")");
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("cuDNN BatchNorm matches the CPU BatchNorm2d in every pass", "[cuda][batchnorm]") {
  INFO(cuda::describe_device(0));
  const Shape shapes[] = {{8, 16, 28, 28}, {64, 64, 7, 7}, {3, 5, 7, 9}, {2, 3, 1, 1}, {1, 4, 5, 5}};
  std::uint64_t seed = 300;
  for (const Shape& in : shapes) {
    BnFixture f(in, seed += 10);
    const auto c = static_cast<std::size_t>(in[1]);
    for (const Pass pass : {Pass::train, Pass::train_replica, Pass::eval}) {
      INFO(in.str() << ", pass " << static_cast<int>(pass));
      const BnResult want = cpu_bn(f, pass), got = gpu_bn(f, pass);
      const BnScales scale = bn_scales(f, pass);
      check_bn("forward", got.y, want.y, scale.y);
      if (pass != Pass::eval) {
        check_bn("backward data", got.dx, want.dx, scale.dx);
        check_bn("backward parameters", got.grads, want.grads, scale.grads);
      }
      // Running statistics: moved by a training pass only; the parameters never change.
      for (std::size_t i = 0; i < 2 * c; ++i) REQUIRE(got.state[i] == f.state[i]);
      if (pass == Pass::train) {
        const std::vector<float> got_stats(got.state.begin() + 2 * c, got.state.end() - 1),
            want_stats(want.state.begin() + 2 * c, want.state.end() - 1);
        check_bn("running statistics", got_stats, want_stats,
                 std::vector<double>(scale.state.begin() + 2 * c, scale.state.end() - 1));
        CHECK(got.state.back() == 8.0f);  // num_batches_tracked, counted once
      } else {
        CHECK(got.state == f.state);
      }
    }
  }
}

TEST_CASE("the CUDA BatchNorm refuses what the CPU layer refuses", "[cuda][batchnorm]") {
  BnFixture f(Shape{1, 4, 1, 1}, 5);  // one value per channel: no batch variance
  cuda::Stream stream;
  CudaLayerOps ops(stream);
  auto state = to_device(f.state), x = to_device(f.x);
  cuda::DeviceBuffer<float> y(f.x.size()), dx(f.x.size()), grads(8), stats(8);
  HEARSAY_CUDA_CHECK(cudaDeviceSynchronize());
  CHECK_THROWS_AS(
      ops.batchnorm_forward(f.bn, f.in, state.data(), x.data(), y.data(), stats.data(), Pass::train),
      std::invalid_argument);
  // An evaluation pass runs, but the GPU never back-propagates one.
  ops.batchnorm_forward(f.bn, f.in, state.data(), x.data(), y.data(), stats.data(), Pass::eval);
  CHECK_THROWS_AS(ops.batchnorm_backward(f.bn, f.in, state.data(), x.data(), y.data(), dx.data(),
                                         grads.data(), stats.data(), Pass::eval),
                  std::logic_error);
  cuda::DnnHandle dnn;
  cuda::BatchNormPlan plan(dnn, cuda::batchnorm_descriptors(2, 4, 1, 1));
  float* p = dx.data();
  CHECK_THROWS_AS(plan.backward(p, p, p, p, p, p, 1e-5, p, p), std::invalid_argument);  // dx == dy
  CHECK_THROWS_AS(plan.forward_train(p, p, p, p, 0.1, 1e-5, p, nullptr, p, p), std::invalid_argument);
  CHECK_THROWS_AS(plan.forward_eval(nullptr, p, p, p, p, p, 1e-5), std::invalid_argument);
  stream.synchronize();
}

TEST_CASE("global average pooling, the residual sum and the batch counter match the CPU bit for bit",
          "[cuda][resnet]") {
  cuda::Stream stream;
  GlobalAvgPool2d pool;
  for (const Shape& in : {Shape{64, 64, 7, 7}, Shape{3, 5, 1, 1}, Shape{2, 3, 28, 28}, Shape{1, 1, 3, 11}}) {
    INFO(in.str());
    const Shape out = pool.output_shape(in);
    const auto x = random_normal(static_cast<std::size_t>(in.numel()), 40, 3.0f);
    const auto dy = random_normal(static_cast<std::size_t>(out.numel()), 41);
    std::vector<float> want(static_cast<std::size_t>(out.numel())), want_dx(x.size()), dy_copy = dy;
    pool.forward(ConstTensorView{x.data(), in}, TensorView{want.data(), out}, nullptr, Pass::train);
    pool.backward(ConstTensorView{x.data(), in}, ConstTensorView{want.data(), out},
                  TensorView{dy_copy.data(), out}, want_dx.data(), nullptr, nullptr);
    auto dx_in = to_device(x), ddy = to_device(dy);
    cuda::DeviceBuffer<float> y(want.size()), dx(x.size());
    HEARSAY_CUDA_CHECK(cudaDeviceSynchronize());
    cuda::global_avgpool_forward(in[0] * in[1], in[2] * in[3], dx_in.data(), y.data(), stream);
    cuda::global_avgpool_backward(in[0] * in[1], in[2] * in[3], ddy.data(), dx.data(), stream);
    stream.synchronize();
    CHECK(cuda_test::differences(to_host(y), want, cuda_test::same_bits<float>) == "");
    CHECK(cuda_test::differences(to_host(dx), want_dx, cuda_test::same_bits<float>) == "");
  }
  const auto a = random_normal(10007, 42), b = random_normal(10007, 43);
  std::vector<float> want = a;
  cpu::add(want.size(), b.data(), want.data());
  cpu::relu_forward(static_cast<long>(want.size()), want.data(), want.data());
  auto y = to_device(a), x = to_device(b);
  cuda::DeviceBuffer<float> counter(1);
  counter.copy_from_host(std::vector<float>{7.0f});
  HEARSAY_CUDA_CHECK(cudaDeviceSynchronize());
  cuda::add_relu(static_cast<long>(a.size()), x.data(), y.data(), stream);
  for (int i = 0; i < 3; ++i) cuda::count_batch(counter.data(), stream);
  stream.synchronize();
  CHECK(cuda_test::differences(to_host(y), want, cuda_test::same_bits<float>) == "");
  CHECK(to_host(counter)[0] == 10.0f);
  CHECK_THROWS_AS(cuda::global_avgpool_forward(2, 0, x.data(), y.data(), stream), std::invalid_argument);
  CHECK_THROWS_AS(cuda::global_avgpool_backward(-1, 4, x.data(), y.data(), stream), std::invalid_argument);
  CHECK_THROWS_AS(cuda::add_relu(4, nullptr, y.data(), stream), std::invalid_argument);
  CHECK_THROWS_AS(cuda::count_batch(nullptr, stream), std::invalid_argument);
  cuda::global_avgpool_forward(0, 4, nullptr, nullptr, stream);  // empty: nothing to do
}

namespace {

// [C,H,W] -> batchnorm2d(C) -> basicblock(C, out, stride) -> globalavgpool2d -> linear(out, 10).
// The BatchNorm in front is the model's first layer (its input gradient is not needed, but
// cuDNN writes one) and takes the block's input gradient into its own parameters'.
std::unique_ptr<Model> block_model(int c, int out, int stride, int size) {
  std::vector<std::unique_ptr<Layer>> layers;
  layers.push_back(std::make_unique<BatchNorm2d>(c));
  layers.push_back(std::make_unique<BasicBlock>(c, out, stride));
  layers.push_back(std::make_unique<GlobalAvgPool2d>());
  layers.push_back(std::make_unique<Linear>(out, 10));
  return std::make_unique<Model>("block", Shape{c, size, size}, 10, std::move(layers));
}

}  // namespace

// Every result is a chain of a few fp32 sums in different orders on each side (cuDNN's and
// cuBLAS's against the CPU's Winograd, blocked GEMMs and per-plane BatchNorm sums), each
// within about 1e-5 of its terms' magnitudes (see check_bn and test_layers_device.cpp); a
// few of them in a row stay well under 1e-4 of a tensor's largest element, and a ReLU input
// within rounding of 0 that flips on one side only moves one term of a gradient's sums. So
// 1e-3 of each tensor's largest element is a wide margin that a wrong stride, a missing
// branch of the sum or a gradient sent to the wrong buffer still fails by orders of magnitude.
TEST_CASE("a BasicBlock on CUDA matches the CPU block, identity and projection shortcuts", "[cuda][resnet]") {
  INFO(cuda::describe_device(0));
  struct Case {
    int c, out, stride, size, batch;
  };
  const Case cases[] = {{16, 16, 1, 14, 8}, {16, 32, 2, 14, 8}, {8, 16, 1, 9, 3}, {32, 64, 2, 7, 5}};
  std::uint64_t seed = 500;
  for (const Case& k : cases) {
    auto model = block_model(k.c, k.out, k.stride, k.size);
    INFO(model->architecture() << ", batch " << k.batch);
    model->init(++seed);
    const auto x = random_normal(static_cast<std::size_t>(k.batch * model->input_floats()), ++seed);
    const auto dlogits = random_normal(static_cast<std::size_t>(k.batch * 10), ++seed, 0.1f);
    const std::vector<float> initial(model->state().begin(), model->state().end());
    const auto want = cuda_test::cpu_pass(*model, x, dlogits, k.batch, Pass::train);
    const auto got = cuda_test::gpu_pass(*model, initial, x, dlogits, k.batch, Pass::train);
    cuda_test::check_logits(got.logits, want.logits, 1e-3);
    cuda_test::check_tensors("gradient", got.grads, want.grads, model->named_params(), 1e-3);
    cuda_test::check_tensors("state", got.state, want.state, model->named_params(), 0.0);  // unchanged
    cuda_test::check_tensors("state", got.state, want.state, model->named_buffers(), 1e-4);
    // Evaluation with the moved running statistics, from the CPU's state after the step.
    const auto want_eval = cuda_test::cpu_pass(*model, x, {}, k.batch, Pass::eval);
    const auto got_eval = cuda_test::gpu_pass(*model, want.state, x, {}, k.batch, Pass::eval);
    cuda_test::check_logits(got_eval.logits, want_eval.logits, 1e-3);
    CHECK(got_eval.state == want.state);  // an evaluation moves nothing
  }
}
