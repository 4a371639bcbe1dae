// ResNet-20 on CUDA against the CPU: one training pass of the whole model through the CUDA
// runner and the CPU Workspace (logits, every parameter's gradient, the running statistics),
// then the CUDA training session against the CPU session over a few steps (losses, the
// whole state including BatchNorm's statistics and counters, evaluation), and what the
// mixer's store of a CUDA session covers with and without the buffers.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "cuda_test_util.hpp"
#include "kernels/cuda/device.hpp"
#include "model/data/dataset.hpp"
#include "model/optim/optimizer.hpp"
#include "model/training_session.hpp"
#include "model/zoo.hpp"
#include "resnet_test_util.hpp"

using namespace hearsay;

namespace {

constexpr std::int64_t kBatch = 32;
const Device kCpu{Device::Kind::cpu, 0};
const Device kGpu{Device::Kind::cuda, 0};

const Dataset& train_set() {
  static const Dataset d = synthetic_dataset(4 * kBatch, 1);
  return d;
}
const Dataset& test_set() {
  static const Dataset d = synthetic_dataset(100, 2);  // evaluation's last chunk is partial
  return d;
}

// ResNet-20 with SGD (momentum, weight decay) and a session on one device, data bound. The
// CPU session runs one thread, so that its BatchNorm sees the whole batch as the GPU's does.
struct Run {
  std::unique_ptr<Model> model;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<TrainingSession> session;
};

// moved: the parameters changed by that relative amount (cuda_test::perturb).
Run start(const Device& device, bool mix_buffers = true, double moved = 0) {
  Run r;
  r.model = make_model("resnet20");
  r.model->init(7);
  if (moved > 0) cuda_test::perturb(r.model->params(), moved, 8);
  r.optimizer = make_sgd(static_cast<std::size_t>(r.model->param_count()),
                         SgdOptions{.momentum = 0.9f, .weight_decay = 5e-4f});
  SessionOptions o;
  o.threads = 1;
  o.max_batch = kBatch;
  o.mix_buffers = mix_buffers;
  r.session = make_training_session(device, *r.model, *r.optimizer, o);
  r.session->bind_data(train_set(), test_set());
  return r;
}

BatchStats step(TrainingSession& session, int s, float lr) {
  std::vector<std::int64_t> idx(static_cast<std::size_t>(kBatch));
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = (s % 4) * kBatch + static_cast<std::int64_t>(i);
  const BatchStats stats = session.compute_gradients(idx);
  session.apply_update(lr);
  return stats;
}

// Losses summed from fp32 logits agree to the bound of the runner test below (1e-3), or to
// kMovedFactor times how far the CPU's own loss moved (cuda_test::check_stats).
void check_stats(const BatchStats& got, const BatchStats& want, std::int64_t correct_slack,
                 const BatchStats* moved = nullptr) {
  cuda_test::check_stats(got, want, correct_slack, 1e-3, moved);
}

constexpr double kMoved = 1e-5;  // the relative change of the CPU's reference runs

}  // namespace

// Twenty layers of the chains test_resnet_device.cpp bounds by 1e-3 for one block: each
// convolution and BatchNorm adds about 1e-5 of its terms' magnitudes, and BatchNorm's
// renormalisation keeps the errors from growing with the depth beyond their sum (a few
// 1e-5 of the logits, more in the first layers' gradients, which sum the most terms). 2e-3
// of a tensor's largest element is still ~10x the expected drift, and orders of magnitude
// below a wrong stride, a missing shortcut or statistics taken from the wrong buffer.
TEST_CASE("a ResNet-20 training pass on CUDA matches the CPU Workspace", "[cuda][resnet]") {
  INFO(cuda::describe_device(0));
  auto model = make_model("resnet20");
  model->init(11);
  const std::int64_t batch = 16;
  const auto x = cuda_test::random_normal(static_cast<std::size_t>(batch * model->input_floats()), 12);
  const auto dlogits = cuda_test::random_normal(static_cast<std::size_t>(batch * model->classes()), 13, 0.1f);
  const std::vector<float> initial(model->state().begin(), model->state().end());
  const auto want = cuda_test::cpu_pass(*model, x, dlogits, batch, Pass::train);
  std::copy(initial.begin(), initial.end(), model->state().begin());
  auto x_moved = x;
  cuda_test::perturb(x_moved, kMoved, 14);
  const auto moved = cuda_test::cpu_pass(*model, x_moved, dlogits, batch, Pass::train);
  std::copy(want.state.begin(), want.state.end(), model->state().begin());
  const auto got = cuda_test::gpu_pass(*model, initial, x, dlogits, batch, Pass::train);
  cuda_test::check_logits(got.logits, want.logits, 1e-3);
  cuda_test::check_tensors("gradient", got.grads, want.grads, model->named_params(), 2e-3, moved.grads);
  cuda_test::check_tensors("state", got.state, want.state, model->named_buffers(), 1e-3, moved.state);
  const auto want_eval = cuda_test::cpu_pass(*model, x, {}, batch, Pass::eval);
  const auto got_eval = cuda_test::gpu_pass(*model, want.state, x, {}, batch, Pass::eval);
  cuda_test::check_logits(got_eval.logits, want_eval.logits, 1e-3);
}

// Three steps with momentum carry the first step's differences on and amplify them: 2e-3
// of each tensor's largest element, as for one pass above, or kMovedFactor times how far a
// CPU session started from parameters moved by kMoved ends from the CPU's (check_tensors);
// the counters must be exactly 3.
TEST_CASE("ResNet-20 steps on CUDA match the CPU session, BatchNorm statistics included", "[cuda][session]") {
  Run cpu = start(kCpu);
  Run ref = start(kCpu, true, kMoved);
  Run gpu = start(kGpu);
  for (int s = 0; s < 3; ++s) {
    INFO("step " << s);
    const BatchStats want = step(*cpu.session, s, 0.05f), moved = step(*ref.session, s, 0.05f);
    check_stats(step(*gpu.session, s, 0.05f), want, 1, &moved);
  }
  gpu.session->params_to_host();
  cuda_test::check_tensors("parameter", gpu.model->state(), cpu.model->state(), cpu.model->named_params(),
                           2e-3, ref.model->state());
  cuda_test::check_tensors("buffer", gpu.model->state(), cpu.model->state(), cpu.model->named_buffers(),
                           2e-3, ref.model->state());
  for (const NamedTensor& t : cpu.model->named_buffers())
    if (t.is_count) CHECK(gpu.model->state()[static_cast<std::size_t>(t.offset)] == 3.0f);
  const BatchStats moved = ref.session->evaluate();
  check_stats(gpu.session->evaluate(), cpu.session->evaluate(), 2, &moved);
}

TEST_CASE("a CUDA session's store mixes the buffers only with mix_buffers", "[cuda][session]") {
  Run with = start(kGpu, true);
  Run without = start(kGpu, false);
  CHECK(with.session->parameters().size() == static_cast<std::size_t>(with.model->state_count()));
  CHECK(without.session->parameters().size() == static_cast<std::size_t>(without.model->param_count()));
  step(*with.session, 0, 0.05f);
  with.session->params_to_host();
  std::vector<float> read(with.session->parameters().size());
  with.session->parameters().read(read);
  const std::vector<float> state(with.model->state().begin(), with.model->state().end());
  CHECK(read == state);  // the running statistics come with the parameters
  // A state edited on the host (a checkpoint, a pulled state) reaches the device whole.
  for (const NamedTensor& t : with.model->named_buffers())
    if (t.is_count) with.model->state()[static_cast<std::size_t>(t.offset)] = 41.0f;
  with.session->params_from_host();
  step(*with.session, 1, 0.05f);
  with.session->params_to_host();
  for (const NamedTensor& t : with.model->named_buffers())
    if (t.is_count) CHECK(with.model->state()[static_cast<std::size_t>(t.offset)] == 42.0f);
}
