// Shared by the GPU tests of the ResNet layers: one training (or evaluation) pass of a
// Model through the CPU Workspace and through the CUDA runner from the same state, input and
// logits gradient, and the comparison of what they give tensor by tensor.
#pragma once
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cuda_test_util.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/device.hpp"
#include "model/cuda/cuda_model_runner.hpp"
#include "model/model.hpp"

namespace hearsay::cuda_test {

// What one pass leaves: the logits, the parameter gradient (empty for an evaluation) and
// the whole state after it (BatchNorm's running statistics moved by a training pass).
struct PassResult {
  std::vector<float> logits, grads, state;
};

// The CPU Workspace on the model's host state, which it updates.
inline PassResult cpu_pass(Model& model, const std::vector<float>& x, const std::vector<float>& dlogits,
                           std::int64_t batch, Pass pass) {
  Workspace ws(model, batch);
  const ConstTensorView logits = ws.forward(x.data(), batch, pass);
  PassResult r;
  r.logits.assign(logits.data, logits.data + logits.numel());
  if (pass != Pass::eval) {
    std::vector<float> d = dlogits;
    ws.backward(d.data(), model.grads().data());
    r.grads.assign(model.grads().begin(), model.grads().end());
  }
  r.state.assign(model.state().begin(), model.state().end());
  return r;
}

// The CUDA runner from `state` (uploaded), on a stream of its own.
inline PassResult gpu_pass(const Model& model, const std::vector<float>& state, const std::vector<float>& x,
                           const std::vector<float>& dlogits, std::int64_t batch, Pass pass) {
  cuda::Stream stream;
  CudaModelRunner runner(model, batch, stream);
  auto d_state = to_device(state), d_x = to_device(x);
  cuda::DeviceBuffer<float> d_grads(static_cast<std::size_t>(model.param_count()));
  // The uploads ran on the legacy default stream, which `stream` does not wait for.
  HEARSAY_CUDA_CHECK(cudaDeviceSynchronize());
  const float* logits = runner.forward(d_state.data(), d_x.data(), batch, pass);
  PassResult r;
  r.logits.resize(static_cast<std::size_t>(batch * model.classes()));
  HEARSAY_CUDA_CHECK(cudaMemcpyAsync(r.logits.data(), logits, r.logits.size() * sizeof(float),
                                     cudaMemcpyDeviceToHost, stream));
  if (pass != Pass::eval) {
    HEARSAY_CUDA_CHECK(cudaMemcpyAsync(runner.logits_grad(), dlogits.data(), dlogits.size() * sizeof(float),
                                       cudaMemcpyHostToDevice, stream));
    runner.backward(d_state.data(), d_grads.data());
  }
  stream.synchronize();
  if (pass != Pass::eval) r.grads = to_host(d_grads);
  r.state = to_host(d_state);
  return r;
}

// How far the GPU may be from the CPU: fp32 sums in other orders differ by a few ulps, but
// where a ReLU's input or a max-pool's tie sits within rounding of its threshold the two
// sides take different branches, and training steps amplify earlier differences (the
// loss surface stretches them by lr times its curvature per step). Neither is a bug, and
// neither has a fixed size: the CPU measures it on itself, as `moved`, its own result
// from inputs or parameters changed by ~1e-5 relative (cuda_test::perturb), a change
// larger than the GPU's rounding. A tensor then passes within `bound` of its largest
// element or within kMovedFactor times what the CPU's own result moved (cuda_test_util.hpp),
// whichever is larger; a wrong kernel (a missing term, a wrong stride, statistics of the
// wrong buffer) differs by orders of magnitude more than either. kAbsFloor: a value that
// cancels to ~0 (a mean of zero-mean activations) errs relative to its O(1) terms.
// max |got - want| over each tensor within bound * max |want| of that tensor (the tensor's
// largest element sets its scale: a gradient's small elements are sums of the same terms
// that cancel, and err relative to the terms, not to themselves), or, given `moved`,
// within kMovedFactor times max |moved - want| (see above). Counters must be equal.
inline void check_tensors(const char* what, std::span<const float> got, std::span<const float> want,
                          const std::vector<NamedTensor>& tensors, double bound,
                          std::span<const float> moved = {}) {
  REQUIRE(got.size() >= want.size());
  if (!moved.empty()) REQUIRE(moved.size() >= want.size());
  for (const NamedTensor& t : tensors) {
    const auto [diff, scale, worst] = tensor_diff(got, want, t);
    const double moved_diff = moved.empty() ? 0.0 : tensor_diff(moved, want, t).diff;
    INFO(what << " " << t.name << ": max |gpu - cpu| " << diff << ", max |cpu| " << scale
              << ", the CPU moved by " << moved_diff);
    if (t.is_count)
      CHECK(diff == 0);
    else
      CHECK(diff <= std::max({bound * scale, kMovedFactor * moved_diff, kAbsFloor}));
  }
}

// The logits as one tensor [batch x classes].
inline void check_logits(std::span<const float> got, std::span<const float> want, double bound) {
  const NamedTensor all{"logits", Shape{static_cast<std::int64_t>(want.size())}, 0};
  check_tensors("forward", got, want, {all}, bound);
}

}  // namespace hearsay::cuda_test
