// The training parameters of a CUDA session as the mixer reaches them. The mixer's host
// copies go through pinned staging buffers on a copy stream of their own; the arithmetic
// (params += work - base) runs on the training stream, which waits for the upload by an
// event, not by blocking the host; the result comes back the same way. Only the calling
// (training) thread waits, for the download it asked for.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/cuda/device.hpp"
#include "model/parameter_store.hpp"

namespace hearsay {

// Owns page-locked host memory (cudaHostAlloc); the destructor never throws.
class PinnedFloats {
 public:
  explicit PinnedFloats(std::size_t n);
  ~PinnedFloats();
  PinnedFloats(const PinnedFloats&) = delete;
  PinnedFloats& operator=(const PinnedFloats&) = delete;
  float* data() { return data_; }
  std::size_t size() const { return size_; }

 private:
  float* data_ = nullptr;
  std::size_t size_ = 0;
};

// Owns a cudaEvent_t without timing (cheapest for ordering streams).
class StreamEvent {
 public:
  StreamEvent();
  ~StreamEvent();
  StreamEvent(const StreamEvent&) = delete;
  StreamEvent& operator=(const StreamEvent&) = delete;
  // Makes `waiting` wait for everything queued on `done` so far.
  void order(cudaStream_t done, cudaStream_t waiting);

 private:
  cudaEvent_t event_ = nullptr;
};

class CudaParameterStore final : public ParameterStore {
 public:
  // params: n floats on `device`, written by work queued on `training`.
  CudaParameterStore(int device, float* params, std::size_t n, cudaStream_t training);
  std::size_t size() const override { return n_; }
  void read(std::span<float> out) override;
  void add_difference_and_read(std::span<const float> work, std::span<const float> base,
                               std::span<float> out) override;
  void write(std::span<const float> values) override;

 private:
  void upload(std::span<const float> host, float* pinned, float* device_dst);  // queued on copy_
  void download_params(std::span<float> out);  // after the training stream's work so far

  int device_;
  float* params_;
  std::size_t n_;
  cudaStream_t training_;
  cuda::Stream copy_;
  PinnedFloats pinned_work_, pinned_base_;
  cuda::DeviceBuffer<float> work_, base_;
  StreamEvent uploaded_, computed_;
};

}  // namespace hearsay
