// The host arithmetic of the CUDA backend's ResNet layers, without a device: cuDNN's
// BatchNorm descriptors (kernels/cuda/batchnorm_layout.hpp) against the CPU BatchNorm2d's
// indexing, the runner's device scratch (model/cuda/cuda_scratch_layout.hpp) for
// BatchNorm and the BasicBlock, and the per-element functions of the global pooling and
// residual kernels (kernels/cuda/math/resnet_math.hpp) against the CPU layers, bit for bit.
// Plain C++: built with or without the CUDA backend.
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <set>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/vector.hpp"
#include "kernels/cuda/batchnorm_layout.hpp"
#include "kernels/cuda/math/resnet_math.hpp"
#include "model/cuda/cuda_scratch_layout.hpp"
#include "model/layers/batchnorm2d.hpp"
#include "model/layers/conv2d.hpp"
#include "model/layers/pool2d.hpp"
#include "model/layers/residual.hpp"
#include "model/zoo.hpp"
#include "tests/cuda_math_test_util.hpp"

using namespace hearsay;
using namespace hearsay::cuda_math_test;

TEST_CASE("batchnorm_descriptors index NCHW as the CPU BatchNorm2d does", "[cuda_layout]") {
  const Shape shapes[] = {{1, 1, 1, 2}, {2, 3, 5, 7}, {64, 16, 28, 28}, {128, 64, 7, 7}, {3, 32, 14, 14}};
  for (const Shape& s : shapes) {
    INFO(s.str());
    const cuda::BatchNormDescriptors d = cuda::batchnorm_descriptors(s[0], s[1], s[2], s[3]);
    CHECK(d.n == s[0]);
    CHECK(d.c == s[1]);
    CHECK(d.h == s[2]);
    CHECK(d.w == s[3]);
    CHECK(d.elements() == s.numel());
    // cpu::batchnorm's plane(i, c) starts at (i * C + c) * H * W, pixels packed after it.
    for (std::int64_t i = 0; i < s[0]; i += std::max<std::int64_t>(1, s[0] / 3))
      for (std::int64_t c = 0; c < s[1]; c += std::max<std::int64_t>(1, s[1] / 3))
        for (std::int64_t y = 0; y < s[2]; ++y)
          for (std::int64_t x = 0; x < s[3]; ++x) {
            const std::int64_t at = i * d.strides[0] + c * d.strides[1] + y * d.strides[2] + x * d.strides[3];
            REQUIRE(at == (i * s[1] + c) * s[2] * s[3] + y * s[3] + x);
          }
    // M of the CPU layer (cpu::BatchNormShape::per_channel), and one mean per channel.
    CHECK(d.per_channel() == cpu::BatchNormShape{s[0], static_cast<int>(s[1]), s[2] * s[3]}.per_channel());
    CHECK(cuda::batchnorm_param_dims(d) == std::array<int, 4>{1, d.c, 1, 1});
  }
}

TEST_CASE("a BatchNorm plan trains only with two or more values per channel, as the CPU layer",
          "[cuda_layout]") {
  CHECK_FALSE(cuda::batchnorm_descriptors(1, 4, 1, 1).can_train());
  CHECK(cuda::batchnorm_descriptors(2, 4, 1, 1).can_train());
  CHECK(cuda::batchnorm_descriptors(1, 4, 1, 2).can_train());
  // The CPU layer refuses the same training pass.
  BatchNorm2d bn(4);
  std::vector<float> state(static_cast<std::size_t>(bn.param_count() + bn.buffer_count()));
  bn.bind(state.data(), 0, bn.param_count());
  bn.init_buffers();
  const Shape one{1, 4, 1, 1};
  std::vector<float> x(4, 1.0f), y(4), scratch(static_cast<std::size_t>(bn.scratch_floats(one)));
  CHECK_THROWS_AS(
      bn.forward(ConstTensorView{x.data(), one}, TensorView{y.data(), one}, scratch.data(), Pass::train),
      std::invalid_argument);
}

TEST_CASE("batchnorm_descriptors rejects bad sizes and tells every shape apart", "[cuda_layout]") {
  CHECK_THROWS_AS(cuda::batchnorm_descriptors(0, 4, 2, 2), std::invalid_argument);
  CHECK_THROWS_AS(cuda::batchnorm_descriptors(2, 0, 2, 2), std::invalid_argument);
  CHECK_THROWS_AS(cuda::batchnorm_descriptors(2, 4, -1, 2), std::invalid_argument);
  CHECK_THROWS_AS(cuda::batchnorm_descriptors(1 << 16, 1 << 10, 1 << 5, 1), std::invalid_argument);  // 2^31
  CHECK_THROWS_AS(cuda::batchnorm_descriptors(std::int64_t{1} << 40, 1 << 30, 1 << 30, 1 << 30),
                  std::invalid_argument);  // the product would overflow int64
  CHECK(cuda::batchnorm_descriptors(1 << 15, 1 << 10, 1 << 5, 1).elements() == std::int64_t{1} << 30);
  std::set<cuda::BatchNormPlanKey> keys;
  const int dims[][4] = {
      {64, 16, 28, 28}, {17, 16, 28, 28}, {64, 32, 14, 14}, {64, 16, 14, 28}, {64, 16, 28, 14}};
  for (const auto& s : dims)
    keys.insert(cuda::batchnorm_plan_key(cuda::batchnorm_descriptors(s[0], s[1], s[2], s[3])));
  CHECK(keys.size() == std::size(dims));
}

namespace {

// Every region of the layout is aligned, in order, disjoint and as large as what it holds.
void check_block_layout(const BasicBlock& block, const Shape& in) {
  INFO(block.describe() << " on " << in.str());
  using R = BlockScratchLayout;
  const R s(block, in);
  const Shape out = block.output_shape(in);
  for (int r = 0; r < R::regions; ++r) {
    INFO("region " << r);
    CHECK(s.offset[r] % 64 == 0);
    CHECK(s.offset[r + 1] >= s.offset[r]);
  }
  for (const R::Region r : {R::a1, R::b1, R::a2}) CHECK(s.size(r) >= out.numel());
  CHECK(s.size(R::s1) >= (block.projects() ? out.numel() : 0));
  // grad_a: the shortcut BatchNorm's output and the inner gradients; grad_b: conv1's dx.
  CHECK(s.size(R::grad_a) >= out.numel());
  CHECK(s.size(R::grad_b) >= std::max(in.numel(), out.numel()));
  CHECK(s.size(R::bn1_stats) >= 2 * out[1]);
  CHECK(s.size(R::bn2_stats) >= 2 * out[1]);
  CHECK(s.size(R::shortcut_stats) >= (block.projects() ? 2 * out[1] : 0));
  CHECK(s.floats() == device_scratch_floats(block, in));
  // The runner sizes the scratch for its largest batch and lays out smaller ones inside it.
  for (std::int64_t n = 1; n < in[0]; ++n) {
    const R smaller(block, in.with_batch(n));
    for (int r = 0; r <= R::regions; ++r) REQUIRE(smaller.offset[r] <= s.offset[r]);
  }
}

}  // namespace

TEST_CASE("the BasicBlock's device scratch holds its activations, gradients and statistics",
          "[cuda_layout]") {
  check_block_layout(BasicBlock(16, 16, 1), Shape{8, 16, 28, 28});  // identity
  check_block_layout(BasicBlock(16, 32, 2), Shape{8, 16, 28, 28});  // projection, 28 -> 14
  check_block_layout(BasicBlock(32, 64, 2), Shape{5, 32, 14, 14});  // 14 -> 7
  check_block_layout(BasicBlock(3, 5, 1), Shape{3, 3, 5, 5});       // projection at stride 1
}

TEST_CASE("device scratch: BatchNorm's statistics, a block's regions, nothing for the rest",
          "[cuda_layout]") {
  const BatchNorm2d bn(24);
  CHECK(batchnorm_stats_floats(bn) == 48);
  CHECK(device_scratch_floats(bn, Shape{4, 24, 5, 5}) == 64);
  CHECK(device_scratch_floats(Conv2d(3, 8, 3), Shape{2, 3, 8, 8}) == 0);
  CHECK(device_scratch_floats(GlobalAvgPool2d(), Shape{2, 3, 8, 8}) == 0);
  // ResNet-20 at batch 128: every layer's scratch, the blocks' activations dominating.
  const auto model = make_model("resnet20");
  std::int64_t total = 0;
  for (std::size_t i = 0; i < model->layers().size(); ++i)
    total += device_scratch_floats(*model->layers()[i], model->shape_after(static_cast<int>(i) - 1, 128));
  CHECK(total > 0);
  CHECK(total % 64 == 0);
}

TEST_CASE("plane_mean and plane_mean_grad match GlobalAvgPool2d bit for bit", "[cuda_math]") {
  const Shape shapes[] = {{1, 1, 1, 1}, {2, 3, 7, 7}, {4, 64, 7, 7}, {3, 5, 28, 28}, {1, 2, 3, 11}};
  GlobalAvgPool2d pool;
  for (const Shape& s : shapes) {
    INFO(s.str());
    const long planes = static_cast<long>(s[0] * s[1]), pixels = static_cast<long>(s[2] * s[3]);
    const std::vector<float> x = normals(static_cast<std::size_t>(s.numel()), 5 + s.numel(), 3.0f);
    const std::vector<float> dy = normals(static_cast<std::size_t>(planes), 6 + planes);
    std::vector<float> want(static_cast<std::size_t>(planes)), want_dx(x.size());
    const Shape out = pool.output_shape(s);
    pool.forward(ConstTensorView{x.data(), s}, TensorView{want.data(), out}, nullptr, Pass::train);
    std::vector<float> dy_copy = dy;
    pool.backward(ConstTensorView{x.data(), s}, ConstTensorView{want.data(), out},
                  TensorView{dy_copy.data(), out}, want_dx.data(), nullptr, nullptr);
    std::vector<float> got(want.size()), got_dx(want_dx.size());
    for (long p = 0; p < planes; ++p)
      got[static_cast<std::size_t>(p)] = cuda::plane_mean(x.data() + p * pixels, pixels);
    for (std::size_t e = 0; e < got_dx.size(); ++e)
      got_dx[e] =
          cuda::plane_mean_grad(dy.data(), static_cast<std::uint32_t>(e), static_cast<std::uint32_t>(pixels));
    CHECK(differences(got, want, same_bits) == "");
    CHECK(differences(got_dx, want_dx, same_bits) == "");
  }
}

TEST_CASE("add_relu_at is the BasicBlock's cpu::add then cpu::relu_forward, bit for bit", "[cuda_math]") {
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  constexpr float kInf = std::numeric_limits<float>::infinity();
  std::vector<float> y = normals(1031, 71), x = normals(1031, 72);
  const float specials[] = {0.0f, -0.0f, kNaN, kInf, -kInf, 1e-40f, -1e-40f};
  for (std::size_t i = 0; i < y.size(); i += 7) y[i] = specials[(i / 7) % std::size(specials)];
  for (std::size_t i = 3; i < x.size(); i += 11) x[i] = specials[(i / 11) % std::size(specials)];
  for (std::size_t i = 5; i < x.size(); i += 13) x[i] = -y[i];  // sums of exactly 0
  std::vector<float> want = y, got(y.size());
  cpu::add(want.size(), x.data(), want.data());
  cpu::relu_forward(static_cast<long>(want.size()), want.data(), want.data());
  for (std::size_t i = 0; i < y.size(); ++i) got[i] = cuda::add_relu_at(y[i], x[i]);
  CHECK(differences(got, want, same_bits) == "");
}

TEST_CASE("fits_index32: 32-bit indices only while a grid-stride loop cannot overflow them", "[cuda_math]") {
  CHECK(cuda::fits_index32(0, 256));
  CHECK(cuda::fits_index32(1000, 132 * 8 * 256));
  CHECK(cuda::fits_index32(0x7FFFFFFFu - 256, 256));
  CHECK_FALSE(cuda::fits_index32(0x7FFFFFFFu - 255, 256));
  CHECK_FALSE(cuda::fits_index32(std::size_t{1} << 31, 1));
  CHECK_FALSE(cuda::fits_index32(std::size_t{1} << 40, 256));
}
