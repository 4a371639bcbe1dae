// The argument checks of the CUDA launchers, which run before anything touches a device:
// empty shapes launch nothing (null pointers allowed), and a null or misaligned pointer,
// a negative size, a bad pool geometry or an out-of-range option throws
// std::invalid_argument naming the launcher. Only built with the CUDA backend; the
// kernels themselves are tested in tests/cuda (device) and test_cuda_math*.cpp (host).
#ifdef HEARSAY_WITH_CUDA

#include <catch2/catch.hpp>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/activation.hpp"
#include "kernels/cuda/convert.hpp"
#include "kernels/cuda/gather.hpp"
#include "kernels/cuda/optim.hpp"
#include "kernels/cuda/pool.hpp"
#include "kernels/cuda/softmax_xent.hpp"
#include "kernels/cuda/vector.hpp"

using namespace hearsay;

namespace {

// The message of the std::invalid_argument that f throws, or what happened instead.
template <class F>
std::string invalid_argument_message(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("another exception: ") + e.what();
  }
  return "no exception";
}

// Stand-ins for device pointers: the checks look at their values only and throw before
// any launch, so these host addresses are never dereferenced.
alignas(16) float fake_floats[8];
alignas(16) std::uint16_t fake_halves[8];
alignas(16) std::int64_t fake_indices[2];
alignas(16) std::uint8_t fake_bytes[8];
alignas(16) cuda::XentSums fake_sums;

#define CHECK_INVALID(launcher, call)                                 \
  do {                                                                \
    const std::string what = invalid_argument_message([&] { call; }); \
    INFO(#call << ": " << what);                                      \
    CHECK(what.find("hearsay::cuda::" launcher ": ") == 0);           \
  } while (false)

}  // namespace

TEST_CASE("CUDA launchers accept empty shapes with null pointers and launch nothing", "[cuda_args]") {
  const cpu::PoolGeometry g{4, 4, 2, 2};
  CHECK_NOTHROW(cuda::bias_act_rows(0, 3, 5, nullptr, true, nullptr, nullptr));
  CHECK_NOTHROW(cuda::bias_act_rows(2, 3, 0, nullptr, true, nullptr, nullptr));
  CHECK_NOTHROW(cuda::bias_act_cols(0, 3, nullptr, false, nullptr, nullptr));
  CHECK_NOTHROW(cuda::relu_forward(0, nullptr, nullptr, nullptr));
  CHECK_NOTHROW(cuda::relu_backward(0, nullptr, nullptr, nullptr, nullptr));
  CHECK_NOTHROW(cuda::bias_grad_rows(4, 0, 5, nullptr, nullptr, nullptr));
  CHECK_NOTHROW(cuda::bias_grad_cols(4, 0, nullptr, nullptr, nullptr));
  CHECK_NOTHROW(cuda::avgpool_forward(g, 0, nullptr, nullptr, nullptr));
  CHECK_NOTHROW(cuda::avgpool_backward(g, 0, nullptr, nullptr, nullptr, nullptr));
  CHECK_NOTHROW(cuda::maxpool_forward(g, 0, nullptr, nullptr, nullptr));
  CHECK_NOTHROW(cuda::maxpool_backward(g, 0, nullptr, nullptr, nullptr, nullptr));
  CHECK_NOTHROW(cuda::softmax_xent(0, 10, nullptr, nullptr, 1.0f, nullptr, nullptr, nullptr, nullptr));
  CHECK(cuda::softmax_xent_scratch_floats(0) == 0);
  CHECK(cuda::softmax_xent_scratch_floats(7) >= 3 * 7);  // a double and a float per row
  CHECK_NOTHROW(cuda::gather_rows(0, 784, nullptr, nullptr, nullptr, nullptr));
  CHECK_NOTHROW(cuda::gather_rows(5, 0, nullptr, nullptr, nullptr, nullptr));
  CHECK_NOTHROW(cuda::gather_labels(0, nullptr, nullptr, nullptr, nullptr));
  CHECK_NOTHROW(
      cuda::sgd_update(0, nullptr, nullptr, nullptr, 0.1f, 0.9f, 0.0f, 0.0f, false, false, nullptr));
  CHECK_NOTHROW(cuda::adamw_update(0, nullptr, nullptr, nullptr, nullptr, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1,
                                   nullptr));
  CHECK_NOTHROW(cuda::weighted_sum(0, 2, nullptr, nullptr, nullptr, nullptr));
  CHECK_NOTHROW(cuda::fill(0, 1.0f, nullptr, nullptr));
  CHECK_NOTHROW(cuda::add(0, nullptr, nullptr, nullptr));
  CHECK_NOTHROW(cuda::scale(0, 2.0f, nullptr, nullptr));
  CHECK(cuda::all_finite(0, nullptr, nullptr));
  CHECK_NOTHROW(cuda::f32_to_f16(0, nullptr, nullptr, nullptr));
  CHECK_NOTHROW(cuda::f16_to_f32(0, nullptr, nullptr, nullptr));
  CHECK_NOTHROW(cuda::f32_to_bf16(0, nullptr, nullptr, nullptr));
  CHECK_NOTHROW(cuda::bf16_to_f32(0, nullptr, nullptr, nullptr));
  CHECK_NOTHROW(cuda::f32_to_int8(0, 256, nullptr, nullptr, nullptr, nullptr));
  CHECK_NOTHROW(cuda::int8_to_f32(0, 256, nullptr, nullptr, nullptr, nullptr));
  CHECK(cuda::f16_all_finite(0, nullptr, nullptr));
  CHECK(cuda::bf16_all_finite(0, nullptr, nullptr));
}

TEST_CASE("CUDA launchers reject null pointers and negative sizes, naming themselves", "[cuda_args]") {
  float* f = fake_floats;
  CHECK_INVALID("bias_act_rows", cuda::bias_act_rows(1, 1, 1, nullptr, false, f, nullptr));
  CHECK_INVALID("bias_act_rows", cuda::bias_act_rows(1, 1, 1, f, false, nullptr, nullptr));
  CHECK_INVALID("bias_act_rows", cuda::bias_act_rows(-1, 1, 1, f, false, f, nullptr));
  CHECK_INVALID("bias_act_rows", cuda::bias_act_rows(1, -2, 1, f, false, f, nullptr));
  CHECK_INVALID("bias_act_cols", cuda::bias_act_cols(2, 3, nullptr, true, f, nullptr));
  CHECK_INVALID("bias_act_cols", cuda::bias_act_cols(2, -3, f, true, f, nullptr));
  CHECK_INVALID("relu_forward", cuda::relu_forward(3, nullptr, f, nullptr));
  CHECK_INVALID("relu_forward", cuda::relu_forward(-3, f, f, nullptr));
  CHECK_INVALID("relu_backward", cuda::relu_backward(3, f, nullptr, f, nullptr));
  CHECK_INVALID("bias_grad_rows", cuda::bias_grad_rows(2, 3, 4, nullptr, f, nullptr));
  CHECK_INVALID("bias_grad_rows", cuda::bias_grad_rows(2, 3, 4, f, nullptr, nullptr));
  CHECK_INVALID("bias_grad_rows", cuda::bias_grad_rows(2, 3, -4, f, f, nullptr));
  CHECK_INVALID("bias_grad_cols", cuda::bias_grad_cols(2, 3, nullptr, f, nullptr));
  CHECK_INVALID("bias_grad_cols", cuda::bias_grad_cols(-2, 3, f, f, nullptr));
  CHECK_INVALID("softmax_xent",
                cuda::softmax_xent(2, 10, nullptr, fake_bytes, 1.0f, f, f, &fake_sums, nullptr));
  CHECK_INVALID("softmax_xent", cuda::softmax_xent(2, 10, f, fake_bytes, 1.0f, f, f, nullptr, nullptr));
  CHECK_INVALID("softmax_xent", cuda::softmax_xent(2, 0, f, fake_bytes, 1.0f, f, f, &fake_sums, nullptr));
  CHECK_INVALID("softmax_xent", cuda::softmax_xent(-1, 10, f, fake_bytes, 1.0f, f, f, &fake_sums, nullptr));
  CHECK_INVALID("gather_rows", cuda::gather_rows(2, 3, f, nullptr, f, nullptr));
  CHECK_INVALID("gather_rows", cuda::gather_rows(2, -3, f, fake_indices, f, nullptr));
  CHECK_INVALID("gather_labels", cuda::gather_labels(2, fake_bytes, fake_indices, nullptr, nullptr));
  CHECK_INVALID("sgd_update",
                cuda::sgd_update(4, f, nullptr, f, 0.1f, 0.0f, 0.0f, 0.0f, false, false, nullptr));
  CHECK_INVALID("adamw_update",
                cuda::adamw_update(4, f, f, nullptr, f, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1, nullptr));
  CHECK_INVALID("fill", cuda::fill(4, 0.0f, nullptr, nullptr));
  CHECK_INVALID("add", cuda::add(4, nullptr, f, nullptr));
  CHECK_INVALID("scale", cuda::scale(4, 2.0f, nullptr, nullptr));
  CHECK_INVALID("all_finite", cuda::all_finite(4, nullptr, nullptr));
  CHECK_INVALID("f32_to_f16", cuda::f32_to_f16(4, f, nullptr, nullptr));
  CHECK_INVALID("f16_to_f32", cuda::f16_to_f32(4, nullptr, f, nullptr));
  CHECK_INVALID("f32_to_bf16", cuda::f32_to_bf16(4, nullptr, fake_halves, nullptr));
  CHECK_INVALID("bf16_to_f32", cuda::bf16_to_f32(4, fake_halves, nullptr, nullptr));
  CHECK_INVALID("f32_to_int8", cuda::f32_to_int8(4, 2, f, nullptr, f, nullptr));
  CHECK_INVALID("int8_to_f32",
                cuda::int8_to_f32(4, 2, reinterpret_cast<std::int8_t*>(fake_bytes), nullptr, f, nullptr));
  CHECK_INVALID("f16_all_finite", cuda::f16_all_finite(4, nullptr, nullptr));
  CHECK_INVALID("bf16_all_finite", cuda::bf16_all_finite(4, nullptr, nullptr));
}

TEST_CASE("CUDA launchers reject misaligned device pointers", "[cuda_args]") {
  // One byte past an aligned address: the kernels would fault loading such an element.
  const auto* bad_f = reinterpret_cast<const float*>(reinterpret_cast<const char*>(fake_floats) + 1);
  auto* bad_h = reinterpret_cast<std::uint16_t*>(reinterpret_cast<char*>(fake_halves) + 1);
  const auto* bad_i = reinterpret_cast<const std::int64_t*>(reinterpret_cast<const char*>(fake_indices) + 4);
  CHECK_INVALID("f32_to_f16", cuda::f32_to_f16(4, bad_f, fake_halves, nullptr));
  CHECK_INVALID("f32_to_f16", cuda::f32_to_f16(4, fake_floats, bad_h, nullptr));
  CHECK_INVALID("bf16_to_f32", cuda::bf16_to_f32(4, bad_h, fake_floats, nullptr));
  CHECK_INVALID("f32_to_int8", cuda::f32_to_int8(4, 2, bad_f, reinterpret_cast<std::int8_t*>(fake_bytes),
                                                 fake_floats, nullptr));
  CHECK_INVALID("f16_all_finite", cuda::f16_all_finite(4, bad_h, nullptr));
  CHECK_INVALID("gather_rows", cuda::gather_rows(2, 3, fake_floats, bad_i, fake_floats, nullptr));
  CHECK_INVALID("softmax_xent", cuda::softmax_xent(2, 10, bad_f, fake_bytes, 1.0f, nullptr, fake_floats,
                                                   &fake_sums, nullptr));
}

TEST_CASE("CUDA pool launchers reject bad geometry", "[cuda_args]") {
  float* f = fake_floats;
  CHECK_INVALID("avgpool_forward", cuda::avgpool_forward(cpu::PoolGeometry{4, 4, 0, 1}, 1, f, f, nullptr));
  CHECK_INVALID("avgpool_backward",
                cuda::avgpool_backward(cpu::PoolGeometry{4, 4, 2, 0}, 1, f, f, nullptr, nullptr));
  CHECK_INVALID("maxpool_forward", cuda::maxpool_forward(cpu::PoolGeometry{1, 4, 2, 2}, 1, f, f, nullptr));
  CHECK_INVALID("maxpool_backward",
                cuda::maxpool_backward(cpu::PoolGeometry{4, 1, 2, 2}, 1, f, f, f, nullptr));
  CHECK_INVALID("maxpool_forward", cuda::maxpool_forward(cpu::PoolGeometry{4, 4, 2, 2}, -1, f, f, nullptr));
  // Checked even when there are no planes: a bad geometry is a bug whatever the batch.
  CHECK_INVALID("avgpool_forward",
                cuda::avgpool_forward(cpu::PoolGeometry{4, 4, 5, 1}, 0, nullptr, nullptr, nullptr));
  CHECK_INVALID("maxpool_backward",
                cuda::maxpool_backward(cpu::PoolGeometry{4, 4, 2, 2}, 1, f, nullptr, f, nullptr));
}

TEST_CASE("CUDA launchers reject out-of-range options as kernels/cpu does", "[cuda_args]") {
  float* f = fake_floats;
  const float* xs[17] = {};
  const float w[17] = {};
  CHECK_INVALID("weighted_sum", cuda::weighted_sum(4, 0, xs, w, f, nullptr));
  CHECK_INVALID("weighted_sum", cuda::weighted_sum(4, 17, xs, w, f, nullptr));
  CHECK_INVALID("weighted_sum", cuda::weighted_sum(0, 17, nullptr, nullptr, nullptr, nullptr));
  CHECK_INVALID("weighted_sum", cuda::weighted_sum(4, 2, xs, w, f, nullptr));  // xs[0] is null
  CHECK_INVALID("weighted_sum", cuda::weighted_sum(4, 2, nullptr, w, f, nullptr));
  // Momentum needs its buffer; AdamW's step is 1-based (checked even for n == 0, as cpu does).
  CHECK_INVALID("sgd_update",
                cuda::sgd_update(4, f, f, nullptr, 0.1f, 0.9f, 0.0f, 0.0f, false, true, nullptr));
  CHECK_INVALID("adamw_update",
                cuda::adamw_update(4, f, f, f, f, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 0, nullptr));
  CHECK_INVALID("adamw_update", cuda::adamw_update(0, nullptr, nullptr, nullptr, nullptr, 1e-3f, 0.9f, 0.999f,
                                                   1e-8f, 0.0f, 0, nullptr));
  // The int8 chunk must hold at least one element (also checked for n == 0, as cpu does).
  CHECK_INVALID("f32_to_int8", cuda::f32_to_int8(0, 0, nullptr, nullptr, nullptr, nullptr));
  CHECK_INVALID("int8_to_f32",
                cuda::int8_to_f32(4, 0, reinterpret_cast<std::int8_t*>(fake_bytes), f, f, nullptr));
}

#endif  // HEARSAY_WITH_CUDA
