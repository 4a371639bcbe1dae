// The CUDA training session (model/cuda) against the CPU session: LeNet trained a few
// steps on both from the same initialisation and data, finite-difference gradient checks
// on the device, evaluation, and checkpoints written on one device and resumed on the
// other.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/rng.hpp"
#include "cuda_test_util.hpp"
#include "model/checkpoint.hpp"
#include "model/data/dataset.hpp"
#include "model/layers/conv2d.hpp"
#include "model/layers/elementwise.hpp"
#include "model/layers/linear.hpp"
#include "model/layers/pool2d.hpp"
#include "model/optim/optimizer.hpp"
#include "model/training_session.hpp"
#include "model/zoo.hpp"

using namespace hearsay;

namespace {

constexpr std::uint64_t kSeed = 42;
constexpr std::int64_t kBatch = 64;
const Device kCpu{Device::Kind::cpu, 0};
const Device kGpu{Device::Kind::cuda, 0};

// Shared by every test: 16 batches of training data and a test set whose size is no
// multiple of the batch (evaluate's last chunk is partial).
const Dataset& train_set() {
  static const Dataset d = synthetic_dataset(16 * kBatch, 1);
  return d;
}
const Dataset& test_set() {
  static const Dataset d = synthetic_dataset(1000, 2);
  return d;
}

std::unique_ptr<Optimizer> optimizer_for(const OptimizerOptions& o, const Model& model) {
  const auto n = static_cast<std::size_t>(model.param_count());
  return o.kind == OptimizerOptions::Kind::sgd ? make_sgd(n, o.sgd) : make_adamw(n, o.adamw);
}

// A LeNet, its optimizer and a session on one device, data bound. Members are destroyed
// in reverse order: the session before the model and optimizer it refers to.
struct Run {
  std::unique_ptr<Model> model;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<TrainingSession> session;
};

// The session is made after init: the CUDA session uploads the parameters it finds.
// moved: the parameters changed by that relative amount (cuda_test::perturb).
Run start(const Device& device, const OptimizerOptions& o, std::uint64_t seed = kSeed, double moved = 0) {
  Run r;
  r.model = make_model("lenet");
  r.model->init(seed);
  if (moved > 0) cuda_test::perturb(r.model->params(), moved, seed + 1);
  r.optimizer = optimizer_for(o, *r.model);
  r.session = make_training_session(device, *r.model, *r.optimizer, {1, kBatch});
  r.session->bind_data(train_set(), test_set());
  return r;
}

// Step s trains on batch s % 16 of the training set: the same examples on every device.
std::vector<std::int64_t> batch_of(int s) {
  std::vector<std::int64_t> idx(static_cast<std::size_t>(kBatch));
  const std::int64_t first = (s % 16) * kBatch;
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = first + static_cast<std::int64_t>(i);
  return idx;
}

BatchStats step(TrainingSession& session, int s, float lr) {
  const auto idx = batch_of(s);
  const BatchStats stats = session.compute_gradients(idx);
  session.apply_update(lr);
  return stats;
}

// How far the GPU may drift from the CPU over steps: see check_tensors in
// resnet_test_util.hpp. `moved` is a CPU run started from parameters changed by kMoved.
constexpr double kMoved = 1e-5;
using cuda_test::kMovedFactor;

// Every parameter tensor of got against want: max |a - b| / max |b| over the tensor
// within `bound`, or within kMovedFactor times how far `moved` (if given) ended from want. A NaN
// anywhere fails.
void check_params(const Model& got, const Model& want, double bound, const Model* moved = nullptr) {
  REQUIRE(got.param_count() == want.param_count());
  const auto a = got.params();
  const auto b = want.params();
  const std::span<const float> m = moved ? moved->params() : std::span<const float>{};
  for (const NamedTensor& t : got.named_params()) {
    const auto [diff, scale, worst] = cuda_test::tensor_diff(a, b, t);
    const double moved_diff = m.empty() ? 0.0 : cuda_test::tensor_diff(m, b, t).diff;
    INFO(t.name << ": max |a-b| " << diff << " at " << worst << " (" << a[static_cast<std::size_t>(worst)]
                << " against " << b[static_cast<std::size_t>(worst)] << "), max |b| " << scale
                << ", the CPU moved by " << moved_diff);
    CHECK(diff <= std::max(bound * scale, kMovedFactor * moved_diff));
  }
}

// The loss of one batch or of the test set: fp32 logits summed into a double, so the two
// devices agree to a few fp32 ulps of each term times their spread; 1e-4 leaves room for
// the parameters having drifted apart by the bound of check_params, and where steps have
// amplified the drift, kMovedFactor times how far the CPU's own loss moved.
void check_stats(const BatchStats& got, const BatchStats& want, std::int64_t correct_slack,
                 const BatchStats* moved = nullptr) {
  cuda_test::check_stats(got, want, correct_slack, 1e-4, moved);
}

}  // namespace

// The bound: both sides compute in fp32 (cuDNN is held to FMA math, no TF32) but sum in
// different orders: cuDNN's and cuBLAS's tilings against the CPU's Winograd F(3x3,5x5) and
// blocked GEMMs. One step's gradients then differ by about sqrt(K) ulps of the terms
// (K up to 64*24*24 for conv1's weight gradient): ~1e-6 relative. Ten steps with momentum
// 0.9 carry and amplify that (the loss surface stretches differences by up to lr times its
// curvature per step, and a ReLU whose input is within rounding of 0 flips on one side
// only), so 1e-3 of each tensor's largest element is ~100x the expected drift and still far
// below what a wrong kernel (a missing term, a wrong stride, a transposed product) gives.
TEST_CASE("ten LeNet steps on CUDA match the CPU session", "[cuda][session]") {
  OptimizerOptions o;
  float lr = 0.05f;
  SECTION("sgd, momentum 0.9") { o.sgd.momentum = 0.9f; }
  SECTION("sgd, nesterov, weight decay") {
    o.sgd.momentum = 0.9f;
    o.sgd.nesterov = true;
    o.sgd.weight_decay = 5e-4f;
  }
  SECTION("adamw") {
    // Adam scales each element's step by its own gradient history, so an element with a
    // tiny gradient still moves by up to lr and rounding in that gradient shows at lr's
    // scale: AdamW's usual small lr keeps that far under the bound.
    o.kind = OptimizerOptions::Kind::adamw;
    lr = 1e-3f;
  }
  Run cpu = start(kCpu, o);
  Run ref = start(kCpu, o, kSeed, kMoved);
  Run gpu = start(kGpu, o);
  for (int s = 0; s < 10; ++s) {
    INFO("step " << s);
    const BatchStats want = step(*cpu.session, s, lr);
    const BatchStats moved = step(*ref.session, s, lr);
    const BatchStats got = step(*gpu.session, s, lr);
    check_stats(got, want, 1, &moved);
  }
  gpu.session->params_to_host();
  check_params(*gpu.model, *cpu.model, 1e-3, ref.model.get());
}

TEST_CASE("evaluate on CUDA matches the CPU session", "[cuda][session]") {
  OptimizerOptions o;
  o.sgd.momentum = 0.9f;
  Run cpu = start(kCpu, o);
  Run gpu = start(kGpu, o);
  // At initialisation and after a few steps (larger logits, sharper softmax).
  for (int round = 0; round < 2; ++round) {
    INFO("round " << round);
    const BatchStats want = cpu.session->evaluate();
    const BatchStats got = gpu.session->evaluate();
    REQUIRE(want.count == test_set().count);
    check_stats(got, want, 2);
    for (int s = 0; s < 3; ++s) {
      step(*cpu.session, s, 0.05f);
      step(*gpu.session, s, 0.05f);
    }
  }
}

namespace {

// A checkpoint file in the temporary directory, removed at the end of the test.
struct TempCheckpoint {
  std::filesystem::path path = std::filesystem::temp_directory_path() /
                               ("hearsay-cuda-test-" + std::to_string(::getpid()) + ".safetensors");
  ~TempCheckpoint() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
};

// What a run writes: the parameters and the optimizer's state, brought to the host first.
void save(Run& r, const std::filesystem::path& file, std::int64_t steps) {
  r.session->params_to_host();
  r.session->optimizer_state_to_host();
  TrainingState state;
  state.step = steps;
  state.seed = kSeed;
  save_optimizer_state(*r.optimizer, state);
  write_checkpoint(file, *r.model, state);
}

}  // namespace

// A checkpoint holds host data only, so a run may resume on the other device: three more
// steps there must follow three more steps of the run that wrote it (bound as above).
TEST_CASE("a checkpoint written on one device resumes on the other", "[cuda][session][checkpoint]") {
  TempCheckpoint file;
  SECTION("cuda to cpu, sgd with momentum") {
    OptimizerOptions o;
    o.sgd.momentum = 0.9f;
    Run gpu = start(kGpu, o);
    for (int s = 0; s < 5; ++s) step(*gpu.session, s, 0.05f);
    save(gpu, file.path, 5);

    // Another initialisation, so what the CPU trains on can only come from the file.
    Run cpu = start(kCpu, o, kSeed + 1);
    const TrainingState state = read_checkpoint(file.path, *cpu.model);
    restore_optimizer_state(state, *cpu.optimizer);
    CHECK(state.step == 5);
    CHECK(cpu.optimizer->steps_taken() == 5);
    for (int s = 5; s < 8; ++s) {
      INFO("step " << s);
      check_stats(step(*cpu.session, s, 0.05f), step(*gpu.session, s, 0.05f), 1);
    }
    gpu.session->params_to_host();
    check_params(*cpu.model, *gpu.model, 1e-3);
  }
  SECTION("cpu to cuda, adamw (moments and the bias correction's step count)") {
    OptimizerOptions o;
    o.kind = OptimizerOptions::Kind::adamw;
    Run cpu = start(kCpu, o);
    for (int s = 0; s < 5; ++s) step(*cpu.session, s, 1e-3f);
    save(cpu, file.path, 5);

    // The peer's resume path: the session exists already, the checkpoint is read into
    // the host buffers and sent to the device.
    Run gpu = start(kGpu, o, kSeed + 1);
    const TrainingState state = read_checkpoint(file.path, *gpu.model);
    restore_optimizer_state(state, *gpu.optimizer);
    gpu.session->params_from_host();
    gpu.session->optimizer_state_from_host();
    for (int s = 5; s < 8; ++s) {
      INFO("step " << s);
      check_stats(step(*gpu.session, s, 1e-3f), step(*cpu.session, s, 1e-3f), 1);
    }
    gpu.session->params_to_host();
    check_params(*gpu.model, *cpu.model, 1e-3);
  }
}
