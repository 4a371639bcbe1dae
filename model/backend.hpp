// The compute backend seam, in the spirit of ggml's: a backend owns memory on one device,
// copies to and from it, says which ops it supports, and runs the vector ops that mixing
// uses. A model trains on a backend through a TrainingSession (training_session.hpp),
// which keeps the flat parameter, gradient and optimizer-state buffers on the device.
//
// The CPU backend is today's kernels (kernels/cpu); the CUDA backend (model/cuda) runs
// cuDNN, cuBLAS and the kernels of kernels/cuda, and exists only in builds with CUDA.
#pragma once
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "model/device.hpp"
#include "model/op.hpp"

namespace hearsay {

class Model;

// Deleter of backend memory: the backend's free, bound to its device.
struct BackendFree {
  void (*free)(float*) = nullptr;
  void operator()(float* p) const noexcept {
    if (p != nullptr && free != nullptr) free(p);
  }
};
using BackendFloats = std::unique_ptr<float[], BackendFree>;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  // One line for logs: "cpu (OpenBLAS ..., 4 threads)", "cuda:0: NVIDIA H100 ...".
  virtual std::string describe() const = 0;
  virtual bool supports(Op op) const = 0;

  // n zeroed floats in this backend's memory (host memory for the CPU). Null for n == 0.
  virtual BackendFloats allocate(std::size_t n) const = 0;
  // Synchronous copies between host memory and this backend's memory.
  virtual void upload(std::span<const float> host, float* dst) const = 0;
  virtual void download(const float* src, std::span<float> host) const = 0;
  // y = a*x + b*y, and y = sum_k w[k] * xs[k] (xs: k pointers into this backend's memory,
  // w on the host), on the device; synchronous.
  virtual void axpby(std::size_t n, float a, const float* x, float b, float* y) const = 0;
  virtual void weighted_sum(std::size_t n, std::size_t k, const float* const* xs, const float* w,
                            float* y) const = 0;
  virtual bool all_finite(std::size_t n, const float* x) const = 0;
};

// The first op `model` needs that `backend` does not support, as "layer 3 (maxpool2d(k2,s2))
// needs maxpool2d, which the cuda backend does not support"; nullopt when it can run it all.
std::optional<std::string> unsupported(const Backend& backend, const Model& model);

// The backend of `device`, shared by everything on it (one per device per process).
// threads: the CPU backend's compute threads (ignored for CUDA). DeviceUnavailable for a
// CUDA device in a build without CUDA.
std::shared_ptr<Backend> make_backend(const Device& device, int threads = 1);

}  // namespace hearsay
