// The CUDA backend: memory on one GPU, synchronous copies, and the vector ops of mixing
// on a stream of its own.
#include "model/cuda/cuda_backend.hpp"

#include <cuda_runtime_api.h>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/vector.hpp"

namespace hearsay {

namespace {

void free_device(float* p) {
  // A failing cudaFree (after a sticky error) leaves nothing to do: clear it, never throw.
  if (cudaFree(p) != cudaSuccess) (void)cudaGetLastError();
}

class CudaBackend final : public Backend {
 public:
  // The device is selected before the stream is made, so the stream lives on it.
  explicit CudaBackend(int index) : index_(selected(index)), description_(cuda::describe_device(index)) {}
  Device device() const override { return Device{Device::Kind::cuda, index_}; }
  std::string describe() const override { return description_; }
  // Every layer of the zoo (BatchNorm and residual blocks through cuDNN), the loss, both
  // optimizers, mixing and the wire formats.
  bool supports(Op) const override { return true; }

  BackendFloats allocate(std::size_t n) const override {
    if (n == 0) return BackendFloats(nullptr, BackendFree{free_device});
    select();
    void* p = nullptr;
    HEARSAY_CUDA_CHECK(cudaMalloc(&p, n * sizeof(float)));
    BackendFloats owned(static_cast<float*>(p), BackendFree{free_device});
    HEARSAY_CUDA_CHECK(cudaMemset(p, 0, n * sizeof(float)));
    // The memset runs on the legacy stream, which stream_ (non-blocking) does not wait for.
    HEARSAY_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
    return owned;
  }
  void upload(std::span<const float> host, float* dst) const override {
    if (host.empty()) return;
    select();
    HEARSAY_CUDA_CHECK(cudaMemcpy(dst, host.data(), host.size_bytes(), cudaMemcpyHostToDevice));
    // From pageable memory cudaMemcpy returns before the data lands, on the legacy stream
    // that stream_ does not wait for: wait here, so that the next kernel reads it.
    HEARSAY_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
  }
  void download(const float* src, std::span<float> host) const override {
    if (host.empty()) return;
    select();
    stream_.synchronize();  // the legacy stream's copy does not wait for work on stream_
    HEARSAY_CUDA_CHECK(cudaMemcpy(host.data(), src, host.size_bytes(), cudaMemcpyDeviceToHost));
  }
  void axpby(std::size_t n, float a, const float* x, float b, float* y) const override {
    select();
    cuda::axpby(n, a, x, b, y, stream_);
    stream_.synchronize();
  }
  void weighted_sum(std::size_t n, std::size_t k, const float* const* xs, const float* w,
                    float* y) const override {
    select();
    cuda::weighted_sum(n, k, xs, w, y, stream_);
    stream_.synchronize();
  }
  bool all_finite(std::size_t n, const float* x) const override {
    select();
    return cuda::all_finite(n, x, stream_);
  }

 private:
  // The current device is per host thread: every entry point selects ours.
  void select() const { HEARSAY_CUDA_CHECK(cudaSetDevice(index_)); }
  static int selected(int index) {
    HEARSAY_CUDA_CHECK(cudaSetDevice(index));
    return index;
  }

  int index_;
  std::string description_;
  cuda::Stream stream_;
};

}  // namespace

std::shared_ptr<Backend> make_cuda_backend(int index) { return std::make_shared<CudaBackend>(index); }

}  // namespace hearsay
