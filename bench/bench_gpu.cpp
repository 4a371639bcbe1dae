// GPU benchmarks (built only with CUDA), one JSON line per measurement on stdout:
//  - training samples/s of a zoo model (--model: lenet by default, mlp, resnet20) on the
//    CUDA training session: full steps (batch gathered on the device, forward, backward,
//    loss read back, momentum update) on synthetic data bound once, after warm-up steps;
//    the median of the repeats and every repeat.
//  - the bandwidth of the averaging kernel (cuda::axpby, y = a*x + b*y: gossip's mixing)
//    against a device-to-device cudaMemcpyAsync of the same length, both timed with CUDA
//    events over many back-to-back calls on one stream of the device. The copy is the
//    ceiling of what a streaming kernel can reach, so the ratio says how close axpby is.
// scripts/gpu-check runs it beside bench/pytorch_lenet.py --device cuda, and with --model
// resnet20 beside bench/pytorch_resnet.py speed --device cuda.
#include <cuda_runtime_api.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_util.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/vector.hpp"
#include "model/data/dataset.hpp"
#include "model/optim/optimizer.hpp"
#include "model/training_session.hpp"
#include "model/zoo.hpp"

using namespace hearsay;
using namespace hearsay::bench;

namespace {

constexpr std::int64_t kBatchesOfData = 16;  // distinct batches the steps cycle through
constexpr int kWarmupSteps = 20;             // cuDNN plans, cuBLAS handles, clocks up

struct TrainOptions {
  int device = 0;
  std::string model = "lenet";
  int steps = 100, repeats = 5;
};

nlohmann::json train_bench(const TrainOptions& o, int batch) {
  auto model = make_model(o.model);
  model->init(0);
  auto optimizer = make_sgd(static_cast<std::size_t>(model->param_count()), SgdOptions{.momentum = 0.9f});
  auto session = make_training_session(Device{Device::Kind::cuda, o.device}, *model, *optimizer, {1, batch});
  const Dataset train = synthetic_dataset(kBatchesOfData * batch, 1);
  const Dataset test = synthetic_dataset(batch, 2);
  session->bind_data(train, test);
  std::vector<std::vector<std::int64_t>> batches(kBatchesOfData);
  for (std::int64_t b = 0; b < kBatchesOfData; ++b)
    for (std::int64_t i = 0; i < batch; ++i) batches[static_cast<std::size_t>(b)].push_back(b * batch + i);

  std::int64_t at = 0;
  auto step = [&] {
    // compute_gradients waits for the step's loss; the update is queued after it.
    session->compute_gradients(batches[static_cast<std::size_t>(at++ % kBatchesOfData)]);
    session->apply_update(0.01f);
  };
  for (int i = 0; i < kWarmupSteps; ++i) step();
  HEARSAY_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<double> rates;
  for (int r = 0; r < o.repeats; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < o.steps; ++i) step();
    HEARSAY_CUDA_CHECK(cudaDeviceSynchronize());  // the last update is part of the work
    rates.push_back(o.steps * static_cast<double>(batch) / seconds_since(t0));
  }
  const double samples_per_s = median(rates);
  const double flops = model->train_flops_per_example();
  return {{"impl", "hearsay"},
          {"bench", "train"},
          {"device", "cuda:" + std::to_string(o.device)},
          {"gpu", cuda::describe_device(o.device)},
          {"model", o.model},
          {"batch", batch},
          {"steps", o.steps},
          {"samples_per_s", samples_per_s},
          {"all", rates},
          {"achieved_gflops", samples_per_s * flops / 1e9}};
}

// Seconds per call of `call` (which queues one operation on `stream`): `calls` back-to-back
// calls between two events, after `calls / 4 + 1` untimed ones; median over repeats.
template <class F>
double seconds_per_call(cudaStream_t stream, int calls, int repeats, F&& call) {
  cudaEvent_t start = nullptr, stop = nullptr;
  HEARSAY_CUDA_CHECK(cudaEventCreate(&start));
  HEARSAY_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < calls / 4 + 1; ++i) call();
  std::vector<double> per_call;
  for (int r = 0; r < repeats; ++r) {
    HEARSAY_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < calls; ++i) call();
    HEARSAY_CUDA_CHECK(cudaEventRecord(stop, stream));
    HEARSAY_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    HEARSAY_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    per_call.push_back(double(ms) / 1e3 / calls);
  }
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(stop);
  return median(per_call);
}

nlohmann::json bandwidth_bench(int device, std::size_t n, int repeats) {
  HEARSAY_CUDA_CHECK(cudaSetDevice(device));
  cuda::Stream stream;
  cuda::DeviceBuffer<float> x(n), y(n);
  cuda::fill(n, 1.0f, x.data(), stream);
  cuda::fill(n, 2.0f, y.data(), stream);
  // Enough calls that each timing spans ~2 GB of traffic (milliseconds, far above the
  // events' resolution), and never fewer than 20.
  const double axpby_bytes = 3.0 * double(n) * sizeof(float);  // read x, read y, write y
  const double copy_bytes = 2.0 * double(n) * sizeof(float);   // read x, write y
  const int calls = std::max(20, static_cast<int>(2e9 / axpby_bytes));
  // a + b = 1: an average, so y stays finite however many calls run.
  const double axpby_s = seconds_per_call(stream, calls, repeats,
                                          [&] { cuda::axpby(n, 0.5f, x.data(), 0.5f, y.data(), stream); });
  const double copy_s = seconds_per_call(stream, calls, repeats, [&] {
    HEARSAY_CUDA_CHECK(
        cudaMemcpyAsync(y.data(), x.data(), n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
  });
  stream.synchronize();
  const double axpby_gbs = axpby_bytes / axpby_s / 1e9, copy_gbs = copy_bytes / copy_s / 1e9;
  return {{"impl", "hearsay"},
          {"bench", "axpby"},
          {"device", "cuda:" + std::to_string(device)},
          {"n", n},
          {"calls", calls},
          {"axpby_gb_s", axpby_gbs},
          {"memcpy_d2d_gb_s", copy_gbs},
          {"ratio", axpby_gbs / copy_gbs}};
}

// Each line as soon as it is measured: a caller reading a pipe sees progress.
void print(const nlohmann::json& line) {
  std::printf("%s\n", line.dump().c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hearsay GPU benchmarks (JSON lines on stdout)"};
  TrainOptions o;
  std::vector<int> batches{256, 64};
  std::vector<std::size_t> sizes{std::size_t{1} << 20, std::size_t{16} << 20, std::size_t{64} << 20};
  std::string only = "all";
  app.add_option("--device", o.device, "CUDA device ordinal")->check(CLI::NonNegativeNumber);
  app.add_option("--model", o.model, "model from the zoo")->check(CLI::IsMember(model_names()));
  app.add_option("--batch", batches, "examples per step (one line per value)")->check(CLI::PositiveNumber);
  app.add_option("--steps", o.steps, "timed steps per repeat")->check(CLI::PositiveNumber);
  app.add_option("--repeats", o.repeats, "timed repeats (the median is reported)")
      ->check(CLI::PositiveNumber);
  app.add_option("--sizes", sizes, "floats per vector of the bandwidth lines (one line per value)")
      ->check(CLI::PositiveNumber);
  app.add_option("--only", only, "which benchmarks")->check(CLI::IsMember({"all", "train", "bandwidth"}));
  CLI11_PARSE(app, argc, argv);

  std::string why;
  if (cuda::device_count_or_zero(why) <= o.device) {
    std::fprintf(stderr, "bench_gpu: no CUDA device %d: %s\n", o.device,
                 why.empty() ? "too few devices" : why.c_str());
    return 1;
  }
  try {
    if (only != "bandwidth")
      for (int batch : batches) print(train_bench(o, batch));
    if (only != "train")
      for (std::size_t n : sizes) print(bandwidth_bench(o.device, n, o.repeats));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpu: %s\n", e.what());
    return 1;
  }
  return 0;
}
