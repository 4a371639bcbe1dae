#include "model/cuda/cuda_parameter_store.hpp"

#include <cstring>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/vector.hpp"

namespace hearsay {

PinnedFloats::PinnedFloats(std::size_t n) : size_(n) {
  if (n == 0) return;
  void* p = nullptr;
  HEARSAY_CUDA_CHECK(cudaHostAlloc(&p, n * sizeof(float), cudaHostAllocDefault));
  data_ = static_cast<float*>(p);
}

PinnedFloats::~PinnedFloats() {
  if (data_ != nullptr && cudaFreeHost(data_) != cudaSuccess) (void)cudaGetLastError();
}

StreamEvent::StreamEvent() { HEARSAY_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }

StreamEvent::~StreamEvent() {
  if (event_ != nullptr && cudaEventDestroy(event_) != cudaSuccess) (void)cudaGetLastError();
}

void StreamEvent::order(cudaStream_t done, cudaStream_t waiting) {
  HEARSAY_CUDA_CHECK(cudaEventRecord(event_, done));
  HEARSAY_CUDA_CHECK(cudaStreamWaitEvent(waiting, event_, 0));
}

CudaParameterStore::CudaParameterStore(int device, float* params, std::size_t n, cudaStream_t training)
    : device_(device),
      params_(params),
      n_(n),
      training_(training),
      mixer_work_(n),
      mixer_base_(n),
      stage_a_(n),
      stage_b_(n),
      work_(n),
      base_(n) {}

std::span<float> CudaParameterStore::mixer_buffer(int which) {
  if (which == 0) return {mixer_work_.data(), n_};
  if (which == 1) return {mixer_base_.data(), n_};
  return {};
}

void CudaParameterStore::upload(std::span<const float> host, PinnedFloats& stage, float* device_dst) {
  if (host.empty()) return;
  const float* source = host.data();
  if (!owns(source)) {
    std::memcpy(stage.data(), source, host.size_bytes());
    source = stage.data();
  }
  HEARSAY_CUDA_CHECK(cudaMemcpyAsync(device_dst, source, host.size_bytes(), cudaMemcpyHostToDevice, copy_));
}

void CudaParameterStore::download_params(std::span<float> out) {
  if (out.empty()) return;
  computed_.order(training_, copy_);  // the steps (and any mixing) queued so far come first
  // Queued after any upload from stage_a_ on the same stream, so reusing it is safe.
  float* into = owns(out.data()) ? out.data() : stage_a_.data();
  HEARSAY_CUDA_CHECK(cudaMemcpyAsync(into, params_, out.size_bytes(), cudaMemcpyDeviceToHost, copy_));
  copy_.synchronize();
  if (into != out.data()) std::memcpy(out.data(), into, out.size_bytes());
}

void CudaParameterStore::read(std::span<float> out) {
  check(out.size(), "read");
  HEARSAY_CUDA_CHECK(cudaSetDevice(device_));
  download_params(out);
}

void CudaParameterStore::add_difference_and_read(std::span<const float> work, std::span<const float> base,
                                                 float scale, std::span<float> out) {
  check(work.size(), "add_difference_and_read");
  check(base.size(), "add_difference_and_read");
  check(out.size(), "add_difference_and_read");
  HEARSAY_CUDA_CHECK(cudaSetDevice(device_));
  // The staging buffers are free: the last call's copies finished before it returned.
  upload(work, stage_a_, work_.data());
  upload(base, stage_b_, base_.data());
  uploaded_.order(copy_, training_);
  // params = scale params + work - scale base, on the training stream, in place (y may
  // alias an x).
  const float* xs[] = {params_, work_.data(), base_.data()};
  const float weights[] = {scale, 1.0f, -scale};
  cuda::weighted_sum(n_, 3, xs, weights, params_, training_);
  download_params(out);
}

void CudaParameterStore::write(std::span<const float> values) {
  check(values.size(), "write");
  HEARSAY_CUDA_CHECK(cudaSetDevice(device_));
  // The training stream may still read params_ (the last step): the copy waits for it.
  computed_.order(training_, copy_);
  upload(values, stage_a_, params_);
  uploaded_.order(copy_, training_);
  // The source (the mixer's working copy, or a staging buffer) may change once this
  // returns: the copy must be done by then.
  copy_.synchronize();
}

}  // namespace hearsay
