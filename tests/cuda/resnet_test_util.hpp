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

// max |got - want| over each tensor within bound * max |want| of that tensor (the tensor's
// largest element sets its scale: a gradient's small elements are sums of the same terms
// that cancel, and err relative to the terms, not to themselves). Counters must be equal.
inline void check_tensors(const char* what, std::span<const float> got, std::span<const float> want,
                          const std::vector<NamedTensor>& tensors, double bound) {
  REQUIRE(got.size() >= want.size());
  for (const NamedTensor& t : tensors) {
    double diff = 0, scale = 0;
    for (std::int64_t i = t.offset; i < t.offset + t.shape.numel(); ++i) {
      const auto k = static_cast<std::size_t>(i);
      const double d = std::fabs(double(got[k]) - double(want[k]));
      if (!(d <= diff)) diff = d;  // NaN propagates
      scale = std::max(scale, std::fabs(double(want[k])));
    }
    INFO(what << " " << t.name << ": max |gpu - cpu| " << diff << ", max |cpu| " << scale);
    if (t.is_count)
      CHECK(diff == 0);
    else
      CHECK(diff <= bound * scale);
  }
}

// The logits as one tensor [batch x classes].
inline void check_logits(std::span<const float> got, std::span<const float> want, double bound) {
  const NamedTensor all{"logits", Shape{static_cast<std::int64_t>(want.size())}, 0};
  check_tensors("forward", got, want, {all}, bound);
}

}  // namespace hearsay::cuda_test
