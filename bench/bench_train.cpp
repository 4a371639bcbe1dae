// Training throughput of the CPU backend: samples/s of full SGD steps (forward,
// backward, momentum update) on synthetic inputs, plus the GFLOP/s this achieves
// against OpenBLAS SGEMM's peak measured in the same process. Prints one JSON line;
// scripts/bench runs it side by side with the PyTorch reference.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "base/rng.hpp"
#include "bench/bench_util.hpp"
#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/gemm.hpp"
#include "model/optim/optimizer.hpp"
#include "model/trainer.hpp"
#include "model/zoo.hpp"

using namespace hearsay;
using namespace hearsay::bench;

namespace {

// Peak single-precision GEMM rate on square matrices large enough for OpenBLAS to
// reach its steady state; the ceiling any GEMM-based layer can hope for.
double sgemm_peak_gflops(int size, int repeats) {
  std::vector<float> a(static_cast<std::size_t>(size) * size, 1.0f), b(a), c(a.size());
  std::vector<double> rates;
  for (int r = 0; r < repeats + 1; ++r) {
    const auto t0 = Clock::now();
    cpu::sgemm(false, false, size, size, size, 1.0f, a.data(), size, b.data(), size, 0.0f, c.data(), size);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (r > 0) rates.push_back(2.0 * size * size * static_cast<double>(size) / s / 1e9);
  }
  return median(rates);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hearsay CPU training benchmark (one JSON line on stdout)"};
  std::string model_name = "lenet";
  int batch = 64, threads = 1, steps = 50, repeats = 5;
  app.add_option("--model", model_name, "model from the zoo")->check(CLI::IsMember(model_names()));
  app.add_option("--batch", batch, "examples per step")->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "compute threads")->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "timed steps per repeat")->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats, "timed repeats (the median is reported)")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  cpu::set_blas_threads(1);
  auto model = make_model(model_name);
  model->init(0);
  Trainer trainer(*model, threads, batch);
  auto opt = make_sgd(static_cast<std::size_t>(model->param_count()), SgdOptions{.momentum = 0.9f});

  Rng rng(7);
  std::vector<float> x(static_cast<std::size_t>(batch * model->input_floats()));
  std::vector<std::uint8_t> y(static_cast<std::size_t>(batch));
  for (auto& v : x) v = static_cast<float>(rng.uniform());
  for (auto& v : y) v = static_cast<std::uint8_t>(rng.below(10));

  auto step = [&] {
    trainer.compute_gradients(x.data(), y.data(), batch);
    opt->step(model->params(), model->grads(), 0.01f);
  };
  for (int i = 0; i < 10; ++i) step();
  std::vector<double> rates;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < steps; ++i) step();
    rates.push_back(steps * static_cast<double>(batch) /
                    std::chrono::duration<double>(Clock::now() - t0).count());
  }
  const double samples_per_s = median(rates);
  const double flops = model->train_flops_per_example();
  const double peak = sgemm_peak_gflops(1024, 5);
  nlohmann::json out = {{"impl", "hearsay"},
                        {"model", model_name},
                        {"batch", batch},
                        {"threads", threads},
                        {"samples_per_s", samples_per_s},
                        {"all", rates},
                        {"mflop_per_sample", flops / 1e6},
                        {"achieved_gflops", samples_per_s * flops / 1e9},
                        {"sgemm_peak_gflops", peak},
                        {"simd", cpu::simd_level()},
                        {"clones", cpu::clone_level()},
                        {"blas", cpu::blas_description()}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
