// cuBLAS (kernels/cuda/blas.hpp) and cuDNN (kernels/cuda/dnn.hpp) against the CPU Linear
// and Conv2d layers: the forward product and both backward products, on random inputs,
// for LeNet's shapes, strides, padding, odd sizes and batch 1.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cuda_test_util.hpp"
#include "kernels/cuda/blas.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/dnn.hpp"
#include "model/flat_buffer.hpp"
#include "model/layers/conv2d.hpp"
#include "model/layers/linear.hpp"

using namespace hearsay;
using cuda_test::random_normal;
using cuda_test::to_device;
using cuda_test::to_host;

namespace {

// A layer's three products without the bias: y = f(x, w), dx = f_x^T(dy, w), dw = f_w^T(x, dy).
struct Products {
  std::vector<float> y, dx, dw;
};

std::vector<float> abs_of(std::vector<float> v) {
  for (auto& e : v) e = std::fabs(e);
  return v;
}

// Runs the CPU layer (already constructed, weights `w`, bias 0) forward then backward.
// Forward first: Conv2d's Winograd backward uses what its forward left in the scratch.
Products run_cpu(Layer& layer, const Shape& in, const std::vector<float>& w, const std::vector<float>& x,
                 const std::vector<float>& dy) {
  FlatBuffer params(static_cast<std::size_t>(layer.param_count())), grads(params.size());
  std::copy(w.begin(), w.end(), params.data());  // the bias after w stays 0
  layer.bind(params.data(), 0);
  const Shape out = layer.output_shape(in);
  FlatBuffer scratch(static_cast<std::size_t>(std::max<std::int64_t>(1, layer.scratch_floats(in))));
  Products p{std::vector<float>(static_cast<std::size_t>(out.numel())), std::vector<float>(x.size()), {}};
  layer.forward(ConstTensorView{x.data(), in}, TensorView{p.y.data(), out}, scratch.data(), Pass::train);
  std::vector<float> dy_copy = dy;  // backward may overwrite dy
  layer.backward(ConstTensorView{x.data(), in}, ConstTensorView{p.y.data(), out},
                 TensorView{dy_copy.data(), out}, p.dx.data(), grads.data(), scratch.data());
  p.dw.assign(grads.data(), grads.data() + w.size());
  return p;
}

// Every product element is a sum of K terms a*b (K = in, out or batch for Linear; up to
// C*R*S, K*R*S or batch*OH*OW for Conv2d). Both sides sum in fp32 in different orders
// (blocked, split, or through Winograd/FFT transforms), each off by at most about
// K * 2^-24 times the sum of |a*b| over the terms, and in practice by sqrt(K) times that
// or less. So the bound is relative to that scale, element by element: 1e-4 of it (the
// largest K here is a few thousand), plus 1e-5 of the largest scale in the tensor,
// because transform-based algorithms (the CPU's Winograd, cuDNN's FFT and Winograd) mix
// the entries of a tile and err relative to the largest of them. The scale is the same
// product of |a| and |b|, computed by the CPU layer. A wrong index or a missing term is
// off by O(1) of the scale; an element left unwritten is NaN (outputs start poisoned).
void check_close(const char* what, const std::vector<float>& gpu, const std::vector<float>& cpu,
                 const std::vector<float>& scale) {
  REQUIRE(gpu.size() == cpu.size());
  REQUIRE(scale.size() == cpu.size());
  const double largest = scale.empty() ? 0.0 : *std::max_element(scale.begin(), scale.end());
  std::size_t bad = 0, first_bad = 0;
  double worst = 0.0;
  for (std::size_t i = 0; i < gpu.size(); ++i) {
    const double diff = std::fabs(double(gpu[i]) - double(cpu[i]));
    const double bound = 1e-4 * scale[i] + 1e-5 * largest;
    if (!(diff <= bound) && bad++ == 0) first_bad = i;
    const double ratio = diff / (scale[i] + 1e-30);
    if (!(ratio <= worst)) worst = ratio;  // NaN propagates as the worst
  }
  INFO(what << ": " << bad << " of " << gpu.size() << " outside the bound; first at " << first_bad << " (gpu "
            << (bad ? gpu[first_bad] : 0.0f) << ", cpu " << (bad ? cpu[first_bad] : 0.0f) << ", scale "
            << (bad ? scale[first_bad] : 0.0f) << "); worst error / scale " << worst);
  CHECK(bad == 0);
}

void check_products(const Products& gpu, const Products& cpu, const Products& scale) {
  check_close("forward", gpu.y, cpu.y, scale.y);
  check_close("backward data", gpu.dx, cpu.dx, scale.dx);
  check_close("backward weight", gpu.dw, cpu.dw, scale.dw);
}

// A device buffer of NaNs (all bits set), so that an element the library does not write
// fails the comparison.
cuda::DeviceBuffer<float> poisoned(std::size_t n) {
  cuda::DeviceBuffer<float> d(n);
  if (n > 0) HEARSAY_CUDA_CHECK(cudaMemset(d.data(), 0xFF, d.bytes()));
  return d;
}

struct LinearShape {
  int batch, in, out;
};

Products run_gpu_linear(cuda::BlasHandle& h, cudaStream_t stream, const LinearShape& s,
                        const std::vector<float>& w, const std::vector<float>& x,
                        const std::vector<float>& dy) {
  const auto dw_in = to_device(w), dx_in = to_device(x), ddy = to_device(dy);
  auto y = poisoned(std::size_t(s.batch) * s.out), dx = poisoned(x.size()), dw = poisoned(w.size());
  // The uploads and memsets ran on the legacy default stream, which a non-blocking stream
  // does not wait for. `stream` is the handle's (nullptr: the legacy default stream).
  HEARSAY_CUDA_CHECK(cudaDeviceSynchronize());
  cuda::linear_forward(h, s.batch, s.in, s.out, dx_in.data(), dw_in.data(), y.data());
  cuda::linear_backward_data(h, s.batch, s.in, s.out, ddy.data(), dw_in.data(), dx.data());
  cuda::linear_backward_weight(h, s.batch, s.in, s.out, ddy.data(), dx_in.data(), dw.data());
  HEARSAY_CUDA_CHECK(cudaStreamSynchronize(stream));
  return {to_host(y), to_host(dx), to_host(dw)};
}

Products run_gpu_conv(cuda::ConvPlan& plan, cudaStream_t stream, const std::vector<float>& w,
                      const std::vector<float>& x, const std::vector<float>& dy) {
  const auto dw_in = to_device(w), dx_in = to_device(x), ddy = to_device(dy);
  auto y = poisoned(dy.size()), dx = poisoned(x.size()), dw = poisoned(w.size());
  HEARSAY_CUDA_CHECK(cudaDeviceSynchronize());  // see run_gpu_linear
  plan.forward(dx_in.data(), dw_in.data(), y.data());
  plan.backward_data(ddy.data(), dw_in.data(), dx.data());
  plan.backward_filter(dx_in.data(), ddy.data(), dw.data());
  HEARSAY_CUDA_CHECK(cudaStreamSynchronize(stream));
  return {to_host(y), to_host(dx), to_host(dw)};
}

struct ConvShape {
  int batch;
  cpu::ConvGeometry g;
  int out_channels;
};

}  // namespace

TEST_CASE("cuBLAS Linear products match the CPU Linear layer", "[cuda][blas]") {
  INFO(cuda::describe_device(0));
  const LinearShape shapes[] = {
      {1, 1, 1},  {1, 784, 256}, {8, 784, 256}, {8, 800, 128},  {7, 128, 10},  // MLP's and LeNet's
      {3, 13, 7}, {33, 17, 1},   {1, 5, 9},     {64, 256, 128}, {5, 1, 3},
  };
  cuda::Stream stream;
  cuda::BlasHandle handle;
  handle.set_stream(stream);
  std::uint64_t seed = 100;
  for (const LinearShape& s : shapes) {
    INFO("batch " << s.batch << " in " << s.in << " out " << s.out);
    const auto w = random_normal(std::size_t(s.out) * s.in, ++seed, 0.5f);
    const auto x = random_normal(std::size_t(s.batch) * s.in, ++seed);
    const auto dy = random_normal(std::size_t(s.batch) * s.out, ++seed);
    Linear layer(s.in, s.out);
    const Shape in{s.batch, s.in};
    const Products cpu = run_cpu(layer, in, w, x, dy);
    const Products scale = run_cpu(layer, in, abs_of(w), abs_of(x), abs_of(dy));
    check_products(run_gpu_linear(handle, stream, s, w, x, dy), cpu, scale);
  }
}

TEST_CASE("cuDNN convolution plans match the CPU Conv2d layer", "[cuda][dnn]") {
  INFO(cuda::describe_device(0));
  const ConvShape shapes[] = {
      {8, {1, 28, 28, 3, 3, 1, 0}, 20},   // LeNet's first convolution
      {1, {1, 28, 28, 3, 3, 1, 0}, 20},   // ... batch 1
      {4, {20, 13, 13, 5, 5, 1, 0}, 50},  // LeNet's second (Winograd on the CPU)
      {3, {3, 9, 11, 3, 3, 2, 1}, 8},     // stride 2, padding 1, odd sizes
      {2, {2, 7, 5, 5, 5, 1, 2}, 3},      // padding 2, kernel as wide as the input
      {2, {5, 6, 6, 1, 1, 1, 0}, 4},      // pointwise
      {1, {4, 10, 10, 1, 1, 3, 0}, 6},    // stride beyond the kernel: some dx stays 0
      {2, {1, 3, 3, 5, 5, 1, 1}, 2},      // kernel as large as the padded input
      {5, {6, 15, 13, 3, 3, 1, 1}, 7},
  };
  cuda::Stream stream;
  cuda::DnnHandle handle;
  handle.set_stream(stream);
  cuda::ConvPlanCache cache(handle);  // one shared workspace, grown shape by shape
  std::uint64_t seed = 200;
  for (const ConvShape& s : shapes) {
    const auto& g = s.g;
    Conv2d layer(g.channels, s.out_channels, g.kernel_h, g.stride, g.padding);
    const Shape in{s.batch, g.channels, g.height, g.width};
    const Shape out = layer.output_shape(in);
    cuda::ConvPlan& plan = cache.plan(g, s.batch, s.out_channels);
    INFO(plan.describe());
    REQUIRE(plan.layout().y_elements() == out.numel());
    REQUIRE(plan.layout().x_elements() == in.numel());
    const auto w = random_normal(static_cast<std::size_t>(plan.layout().w_elements()), ++seed, 0.5f);
    const auto x = random_normal(static_cast<std::size_t>(in.numel()), ++seed);
    const auto dy = random_normal(static_cast<std::size_t>(out.numel()), ++seed);
    const Products cpu = run_cpu(layer, in, w, x, dy);
    const Products scale = run_cpu(layer, in, abs_of(w), abs_of(x), abs_of(dy));
    check_products(run_gpu_conv(plan, stream, w, x, dy), cpu, scale);
  }
  CHECK(cache.size() == std::size(shapes));
}

TEST_CASE("A ConvPlan with its own workspace on the default stream", "[cuda][dnn]") {
  cuda::DnnHandle handle;
  const cpu::ConvGeometry g{3, 12, 12, 3, 3, 1, 1};
  cuda::ConvPlan plan(handle, g, 2, 4);
  INFO(plan.describe());
  Conv2d layer(3, 4, 3, 1, 1);
  const Shape in{2, 3, 12, 12};
  const auto w = random_normal(static_cast<std::size_t>(plan.layout().w_elements()), 1, 0.5f);
  const auto x = random_normal(static_cast<std::size_t>(in.numel()), 2);
  const auto dy = random_normal(static_cast<std::size_t>(layer.output_shape(in).numel()), 3);
  const Products gpu = run_gpu_conv(plan, nullptr, w, x, dy);
  check_products(gpu, run_cpu(layer, in, w, x, dy), run_cpu(layer, in, abs_of(w), abs_of(x), abs_of(dy)));
}

TEST_CASE("ConvPlanCache reuses the plan of a shape and shares its workspace", "[cuda][dnn]") {
  cuda::DnnHandle handle;
  cuda::ConvPlanCache cache(handle);
  const cpu::ConvGeometry lenet1{1, 28, 28, 3, 3, 1, 0}, lenet2{20, 13, 13, 5, 5, 1, 0};
  cuda::ConvPlan& a = cache.plan(lenet1, 64, 20);
  CHECK(&cache.plan(lenet1, 64, 20) == &a);
  cuda::ConvPlan& last_batch = cache.plan(lenet1, 17, 20);  // an epoch's smaller last batch
  CHECK(&last_batch != &a);
  CHECK(last_batch.layout().n == 17);
  cuda::ConvPlan& b = cache.plan(lenet2, 64, 50);
  CHECK(&b != &a);
  CHECK(&cache.plan(lenet1, 64, 20) == &a);
  CHECK(&cache.plan(lenet2, 64, 50) == &b);
  CHECK(cache.size() == 3);
  CHECK(cache.workspace_bytes() >=
        std::max({a.workspace_bytes(), b.workspace_bytes(), last_batch.workspace_bytes()}));
  CHECK(a.describe().find("forward") != std::string::npos);
  CHECK(a.describe().find("backward filter") != std::string::npos);
}

TEST_CASE("cuBLAS and cuDNN handles move, and the calls check their arguments", "[cuda][blas][dnn]") {
  cuda::Stream stream;
  cuda::BlasHandle first;
  cuda::BlasHandle blas(std::move(first));
  CHECK(first.get() == nullptr);
  blas.set_stream(stream);
  CHECK(blas.stream() == stream.get());
  cuda::DnnHandle first_dnn;
  cuda::DnnHandle dnn(std::move(first_dnn));
  CHECK(first_dnn.get() == nullptr);
  dnn.set_stream(stream);
  CHECK(dnn.stream() == stream.get());

  cuda::DeviceBuffer<float> buf(64);
  float* p = buf.data();
  CHECK_THROWS_AS(cuda::linear_forward(blas, 0, 2, 2, p, p, p), std::invalid_argument);
  CHECK_THROWS_AS(cuda::linear_forward(blas, 2, 2, 2, nullptr, p, p), std::invalid_argument);
  CHECK_THROWS_AS(cuda::linear_backward_data(blas, 2, -1, 2, p, p, p), std::invalid_argument);
  CHECK_THROWS_AS(cuda::linear_backward_data(blas, 2, 2, 2, p, nullptr, p), std::invalid_argument);
  CHECK_THROWS_AS(cuda::linear_backward_weight(blas, 2, 2, 0, p, p, p), std::invalid_argument);
  CHECK_THROWS_AS(cuda::linear_backward_weight(blas, 2, 2, 2, p, p, nullptr), std::invalid_argument);

  CHECK_THROWS_AS(cuda::ConvPlan(dnn, cpu::ConvGeometry{1, 2, 2, 5, 5, 1, 0}, 1, 1), std::invalid_argument);
  CHECK_THROWS_AS(cuda::ConvPlan(dnn, cpu::ConvGeometry{1, 4, 4, 3, 3, 1, 0}, 0, 1), std::invalid_argument);
  cuda::ConvPlan plan(dnn, cpu::ConvGeometry{1, 4, 4, 3, 3, 1, 0}, 1, 1);
  CHECK_THROWS_AS(plan.forward(nullptr, p, p), std::invalid_argument);
  CHECK_THROWS_AS(plan.backward_data(p, p, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(plan.backward_filter(p, nullptr, p), std::invalid_argument);
  stream.synchronize();
}
