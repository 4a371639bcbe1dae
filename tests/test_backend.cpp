// The backend seam on the CPU: devices as --device names them and as this machine can give
// them, the CPU backend's memory and vector ops, what a backend that lacks an op says, and
// the one training loop (resumable mid-epoch, stoppable, the same numbers as the plain
// Trainer + Optimizer steps it replaced).
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <limits>
#include <memory>
#include <numeric>
#include <vector>

#include "kernels/cpu/vector.hpp"
#include "model/backend.hpp"
#include "model/data/dataset.hpp"
#include "model/device.hpp"
#include "model/layers/elementwise.hpp"
#include "model/layers/linear.hpp"
#include "model/layers/pool2d.hpp"
#include "model/optim/optimizer.hpp"
#include "model/optim/schedule.hpp"
#include "model/trainer.hpp"
#include "model/training_loop.hpp"
#include "model/training_session.hpp"
#include "model/zoo.hpp"

using namespace hearsay;
using Catch::Matchers::Contains;

namespace {

std::string parse_error(const std::string& text) {
  try {
    parse_device(text);
    return "";
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
}

// A backend that can do everything but max pooling, to see what the refusal says.
class NoMaxPoolBackend final : public Backend {
 public:
  Device device() const override { return Device{Device::Kind::cuda, 3}; }
  std::string describe() const override { return "test"; }
  bool supports(Op op) const override { return op != Op::maxpool2d; }
  BackendFloats allocate(std::size_t) const override { return {}; }
  void upload(std::span<const float>, float*) const override {}
  void download(const float*, std::span<float>) const override {}
  void axpby(std::size_t, float, const float*, float, float*) const override {}
  void weighted_sum(std::size_t, std::size_t, const float* const*, const float*, float*) const override {}
  bool all_finite(std::size_t, const float*) const override { return true; }
};

std::vector<std::int64_t> iota(std::int64_t n) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), std::int64_t{0});
  return v;
}

// An MLP with SGD + momentum on 200 synthetic examples: small enough for many runs.
struct SmallRun {
  std::unique_ptr<Model> model = make_model("mlp");
  std::unique_ptr<Optimizer> optimizer;
  Dataset train = synthetic_dataset(200, 5), test = synthetic_dataset(50, 6);
  std::vector<std::int64_t> order = iota(200);
  SmallRun() {
    model->init(11);
    optimizer = make_sgd(static_cast<std::size_t>(model->param_count()), SgdOptions{.momentum = 0.9f});
  }
};

}  // namespace

TEST_CASE("the device flag: auto, cpu, cuda and cuda:N parse and anything else is named", "[device]") {
  CHECK(parse_device("auto").kind == DeviceRequest::Kind::automatic);
  CHECK(parse_device("cpu").kind == DeviceRequest::Kind::cpu);
  const auto cuda = parse_device("cuda");
  CHECK((cuda.kind == DeviceRequest::Kind::cuda && cuda.index == -1));
  const auto cuda2 = parse_device("cuda:2");
  CHECK((cuda2.kind == DeviceRequest::Kind::cuda && cuda2.index == 2));
  for (const char* bad : {"", "gpu", "cuda:", "cuda:-1", "cuda:1x", "cuda:99999", "CUDA", "cuda0", " cpu"})
    CHECK_THAT(parse_error(bad), Contains("is not one of auto, cpu, cuda, cuda:N"));
  CHECK(Device{Device::Kind::cuda, 1}.str() == "cuda:1");
  CHECK(Device{}.str() == "cpu");
}

TEST_CASE("choose_device gives what this machine has, or one line saying why not", "[device]") {
  std::string why_none;
  const int gpus = cuda_device_count(why_none);
  CHECK(choose_device(parse_device("cpu")).device == Device{});
  const DeviceChoice automatic = choose_device(parse_device("auto"), 5);
  if (gpus == 0) {
    CHECK_FALSE(why_none.empty());
    CHECK(automatic.device == Device{});
    CHECK_THAT(automatic.reason, Contains(why_none));  // the log says why not the GPU
    CHECK_THAT(automatic.reason, Contains("training on the CPU"));
    // It said "cudaErrorInsufficientDriver: CUDA driver version is insufficient" on machines
    // without a GPU, which reads as "upgrade your driver".
    if (built_with_cuda() && ::access("/dev/nvidiactl", F_OK) != 0)
      CHECK_THAT(why_none, Contains("no GPU usable here"));
    for (const char* asked : {"cuda", "cuda:0", "cuda:3"}) {
      try {
        choose_device(parse_device(asked));
        FAIL("no DeviceUnavailable for " << asked);
      } catch (const DeviceUnavailable& e) {
        const std::string what = e.what();
        CHECK_THAT(what, Contains(std::string("--device ") + asked + ": " + why_none));
        CHECK_THAT(what, Contains("use --device cpu"));
        CHECK(what.find('\n') == std::string::npos);
      }
    }
    if (!built_with_cuda()) CHECK_THAT(why_none, Contains("this build has no CUDA backend"));
  } else {
    CHECK(automatic.device == (Device{Device::Kind::cuda, 5 % gpus}));  // the local rank's GPU
    CHECK(choose_device(parse_device("cuda"), 1).device == (Device{Device::Kind::cuda, 1 % gpus}));
    CHECK_THROWS_WITH(choose_device(parse_device("cuda:" + std::to_string(gpus))),
                      Contains("no CUDA device " + std::to_string(gpus)));
  }
}

TEST_CASE("why no GPU is usable is said in a user's words", "[device]") {
  const std::string insufficient =
      "cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA runtime version";
  // The runtime's words where no driver is installed at all: no GPU here, nothing to upgrade.
  CHECK(no_gpu_reason(insufficient, false) == "no GPU usable here: no NVIDIA driver is installed (libcuda.so.1)");
  // A driver that is there but too old: then upgrading it is the advice.
  CHECK_THAT(no_gpu_reason(insufficient, true), Contains("the NVIDIA driver is older than this build's"));
  CHECK_THAT(no_gpu_reason(insufficient, true), Contains("update the driver"));
  CHECK_THAT(no_gpu_reason("cudaErrorNoDevice: no CUDA-capable device is detected", true),
             Contains("no GPU usable here: the NVIDIA driver sees no CUDA device"));
  CHECK_THAT(no_gpu_reason("cudaErrorUnknown: unknown error", true),
             Contains("no GPU usable here (cudaErrorUnknown"));
}

TEST_CASE("the local rank comes from the launcher's environment", "[device]") {
  for (const char* name :
       {"HEARSAY_LOCAL_RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
    unsetenv(name);
  CHECK(local_rank_from_environment(4) == 4);
  setenv("SLURM_LOCALID", "2", 1);
  CHECK(local_rank_from_environment() == 2);
  setenv("LOCAL_RANK", "1", 1);  // torchrun's
  CHECK(local_rank_from_environment() == 1);
  setenv("HEARSAY_LOCAL_RANK", "3", 1);  // scripts/launch's comes first
  CHECK(local_rank_from_environment() == 3);
  setenv("HEARSAY_LOCAL_RANK", "x", 1);  // unreadable: the next one
  setenv("LOCAL_RANK", "-1", 1);
  CHECK(local_rank_from_environment() == 2);
  unsetenv("HEARSAY_LOCAL_RANK");
  unsetenv("LOCAL_RANK");
  unsetenv("SLURM_LOCALID");
}

TEST_CASE("the CPU backend: zeroed memory, copies and the mixing ops", "[backend]") {
  const auto backend = make_backend(Device{}, 2);
  CHECK(backend->device() == Device{});
  for (int op = 0; op < kOpCount; ++op) CHECK(backend->supports(static_cast<Op>(op)));
  const std::size_t n = 1001;
  BackendFloats a = backend->allocate(n), b = backend->allocate(n);
  std::vector<float> host(n);
  backend->download(a.get(), host);
  CHECK(std::all_of(host.begin(), host.end(), [](float v) { return v == 0.0f; }));
  std::vector<float> x(n), y(n);
  for (std::size_t i = 0; i < n; ++i)
    x[i] = 0.5f * static_cast<float>(i), y[i] = 3.0f - static_cast<float>(i);
  backend->upload(x, a.get());
  backend->upload(y, b.get());
  backend->axpby(n, 0.25f, a.get(), 0.75f, b.get());
  backend->download(b.get(), host);
  std::vector<float> want = y;
  cpu::axpby(n, 0.25f, x.data(), 0.75f, want.data());
  CHECK(host == want);
  const float* xs[] = {a.get(), b.get()};
  const float w[] = {2.0f, -1.0f};
  BackendFloats c = backend->allocate(n);
  backend->weighted_sum(n, 2, xs, w, c.get());
  backend->download(c.get(), host);
  for (std::size_t i = 0; i < n; ++i) REQUIRE(host[i] == 2.0f * x[i] - want[i]);
  CHECK(backend->all_finite(n, c.get()));
  c.get()[7] = std::numeric_limits<float>::infinity();
  CHECK_FALSE(backend->all_finite(n, c.get()));
  CHECK(backend->allocate(0) == nullptr);
}

TEST_CASE("a backend that lacks an op names the layer that needs it", "[backend]") {
  NoMaxPoolBackend backend;
  CHECK_FALSE(unsupported(backend, *make_model("lenet")));  // average pooling only
  auto model = std::make_unique<Model>("pooled", Shape{1, 4, 4}, 2, [] {
    std::vector<std::unique_ptr<Layer>> v;
    v.push_back(std::make_unique<MaxPool2d>(2));
    v.push_back(std::make_unique<Flatten>());
    v.push_back(std::make_unique<Linear>(4, 2));
    return v;
  }());
  const auto why = unsupported(backend, *model);
  REQUIRE(why);
  CHECK(*why == "layer 0 (maxpool2d(k2,s2)) needs maxpool2d, which the cuda:3 backend does not support");
}

TEST_CASE("a CPU session's steps are the Trainer and Optimizer steps, bit for bit", "[backend][session]") {
  SmallRun via_session, by_hand;
  auto session = make_training_session(Device{}, *via_session.model, *via_session.optimizer, {1, 32});
  session->bind_data(via_session.train, via_session.test);
  Trainer trainer(*by_hand.model, 1, 32);
  std::vector<float> x(32 * 784);
  std::vector<std::uint8_t> y(32);
  for (int step = 0; step < 5; ++step) {
    const std::span<const std::int64_t> batch(via_session.order.data() + step * 32, 32);
    const BatchStats a = session->compute_gradients(batch);
    session->apply_update(0.05f);
    gather_batch(by_hand.train, batch, x.data(), y.data());
    const BatchStats b = trainer.compute_gradients(x.data(), y.data(), 32);
    by_hand.optimizer->step(by_hand.model->params(), by_hand.model->grads(), 0.05f);
    CHECK(a.loss_sum == b.loss_sum);
  }
  CHECK(std::equal(via_session.model->params().begin(), via_session.model->params().end(),
                   by_hand.model->params().begin()));
  const BatchStats test = session->evaluate();
  CHECK(test.count == 50);
  CHECK(test.loss_sum ==
        trainer.evaluate(by_hand.test.images.data(), by_hand.test.labels.data(), 50).loss_sum);
  CHECK_THROWS_AS(session->compute_gradients(std::span<const std::int64_t>(via_session.order.data(), 33)),
                  std::invalid_argument);
}

TEST_CASE("the training loop: hooks in order, a stop mid-epoch, and a resume that matches",
          "[backend][loop]") {
  const auto schedule = parse_lr_schedule("cosine", 0.05f, 2 * 7);
  // Straight through: 2 epochs of 200 examples at batch 32 are 7 steps each (the last 8).
  SmallRun straight;
  auto session = make_training_session(Device{}, *straight.model, *straight.optimizer, {1, 32});
  session->bind_data(straight.train, straight.test);
  TrainingPosition pos;
  std::vector<std::string> calls;
  std::vector<std::int64_t> last_batch_sizes;
  TrainingHooks hooks;
  hooks.epoch_order = [&](std::int64_t e) -> const std::vector<std::int64_t>& {
    calls.push_back("order" + std::to_string(e));
    return straight.order;
  };
  hooks.after_gradients = [&](const BatchStats& s, std::chrono::nanoseconds) {
    calls.push_back("grad");
    last_batch_sizes.push_back(s.count);
  };
  hooks.after_update = [&](const StepReport& r) {
    calls.push_back("update" + std::to_string(r.position.step));
  };
  hooks.after_step = [&](const StepReport&) { calls.push_back("step"); };
  hooks.after_epoch = [&](const EpochReport& e) {
    calls.push_back("epoch" + std::to_string(e.epoch) + (e.complete ? "" : "?"));
    CHECK(e.train.count == 200);
  };
  run_training(*session, *schedule, 2, 32, pos, hooks);
  CHECK(pos.step == 14);
  CHECK(pos.epoch == 3);
  CHECK(pos.epoch_step == 0);
  REQUIRE(calls.size() == 2 + 14 * 3 + 2);
  CHECK(calls[0] == "order1");
  CHECK((calls[1] == "grad" && calls[2] == "update1" && calls[3] == "step"));
  CHECK(calls[1 + 7 * 3] == "epoch1");
  CHECK(calls.back() == "epoch2");
  CHECK(last_batch_sizes[6] == 200 - 6 * 32);

  // Stopped after 10 steps (epoch 2, its 3rd step done), then resumed from that position
  // in a new loop: the same parameters as straight through.
  SmallRun halted;
  auto session2 = make_training_session(Device{}, *halted.model, *halted.optimizer, {1, 32});
  session2->bind_data(halted.train, halted.test);
  TrainingPosition pos2;
  bool incomplete_seen = false;
  TrainingHooks stop_at_10;
  stop_at_10.epoch_order = [&](std::int64_t) -> const std::vector<std::int64_t>& { return halted.order; };
  stop_at_10.should_stop = [&] { return pos2.step == 10; };
  stop_at_10.after_epoch = [&](const EpochReport& e) { incomplete_seen |= !e.complete && e.epoch == 2; };
  run_training(*session2, *schedule, 2, 32, pos2, stop_at_10);
  CHECK(incomplete_seen);
  CHECK((pos2.step == 10 && pos2.epoch == 2 && pos2.epoch_step == 3));
  TrainingHooks rest;
  rest.epoch_order = stop_at_10.epoch_order;
  run_training(*session2, *schedule, 2, 32, pos2, rest);
  CHECK(pos2.step == 14);
  CHECK(std::equal(halted.model->params().begin(), halted.model->params().end(),
                   straight.model->params().begin()));
}
