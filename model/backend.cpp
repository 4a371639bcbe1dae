#include "model/backend.hpp"

#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include "kernels/cpu/convert.hpp"
#include "kernels/cpu/vector.hpp"
#include "model/layer.hpp"
#include "model/model.hpp"

#ifdef HEARSAY_WITH_CUDA
#include "model/cuda/cuda_backend.hpp"
#endif

namespace hearsay {

const char* op_name(Op op) {
  switch (op) {
    case Op::linear:
      return "linear";
    case Op::conv2d:
      return "conv2d";
    case Op::relu:
      return "relu";
    case Op::flatten:
      return "flatten";
    case Op::avgpool2d:
      return "avgpool2d";
    case Op::maxpool2d:
      return "maxpool2d";
    case Op::batchnorm2d:
      return "batchnorm2d";
    case Op::global_avgpool2d:
      return "global_avgpool2d";
    case Op::basic_block:
      return "basic_block";
    case Op::softmax_xent:
      return "softmax_xent";
    case Op::sgd:
      return "sgd";
    case Op::adamw:
      return "adamw";
    case Op::axpby:
      return "axpby";
    case Op::weighted_sum:
      return "weighted_sum";
    case Op::wire_f16:
      return "wire_f16";
    case Op::wire_bf16:
      return "wire_bf16";
    case Op::wire_int8:
      return "wire_int8";
    case Op::finite_check:
      return "finite_check";
  }
  return "?";
}

std::optional<std::string> unsupported(const Backend& backend, const Model& model) {
  const auto& layers = model.layers();
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const Op op = layers[i]->op();
    if (!backend.supports(op))
      return "layer " + std::to_string(i) + " (" + layers[i]->describe() + ") needs " + op_name(op) +
             ", which the " + backend.device().str() + " backend does not support";
  }
  if (!backend.supports(Op::softmax_xent))
    return "the loss needs softmax_xent, which the " + backend.device().str() + " backend does not support";
  return std::nullopt;
}

namespace {

void free_host(float* p) { std::free(p); }

// Today's kernels over host memory: every op, synchronous by nature.
class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) : threads_(threads) {}
  Device device() const override { return Device{}; }
  std::string describe() const override {
    return "cpu, " + std::to_string(threads_) + " compute thread" + (threads_ == 1 ? "" : "s");
  }
  bool supports(Op) const override { return true; }
  BackendFloats allocate(std::size_t n) const override {
    if (n == 0) return BackendFloats(nullptr, BackendFree{free_host});
    const std::size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
    auto* p = static_cast<float*>(std::aligned_alloc(64, bytes));
    if (p == nullptr) throw std::bad_alloc();
    std::memset(p, 0, bytes);
    return BackendFloats(p, BackendFree{free_host});
  }
  void upload(std::span<const float> host, float* dst) const override {
    if (!host.empty()) std::memcpy(dst, host.data(), host.size_bytes());
  }
  void download(const float* src, std::span<float> host) const override {
    if (!host.empty()) std::memcpy(host.data(), src, host.size_bytes());
  }
  void axpby(std::size_t n, float a, const float* x, float b, float* y) const override {
    cpu::axpby(n, a, x, b, y);
  }
  void weighted_sum(std::size_t n, std::size_t k, const float* const* xs, const float* w,
                    float* y) const override {
    cpu::weighted_sum(n, k, xs, w, y);
  }
  bool all_finite(std::size_t n, const float* x) const override { return cpu::all_finite(n, x); }

 private:
  int threads_;
};

}  // namespace

std::shared_ptr<Backend> make_backend(const Device& device, int threads) {
  if (!device.is_cuda()) return std::make_shared<CpuBackend>(threads < 1 ? 1 : threads);
#ifdef HEARSAY_WITH_CUDA
  return make_cuda_backend(device.index);
#else
  throw DeviceUnavailable("--device " + device.str() + ": this build has no CUDA backend; use --device cpu");
#endif
}

}  // namespace hearsay
