// The training parameters of a CUDA session as the mixer reaches them. The mixer keeps its
// working copy and base (its wire buffers) in page-locked memory this store gives it
// (mixer_buffer), so they go to and from the device by DMA on a copy stream of their own,
// with no staging copy; the arithmetic (params += work - base) runs on the training
// stream, which waits for the upload by an event, not by blocking the host. Only the
// calling (training) thread waits, for the download it asked for. Host spans that are not
// the store's own go through staging buffers.
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
  void add_difference_and_read(std::span<const float> work, std::span<const float> base, float scale,
                               std::span<float> out) override;
  void write(std::span<const float> values) override;
  std::span<float> mixer_buffer(int which) override;

 private:
  bool owns(const float* p) { return p == mixer_work_.data() || p == mixer_base_.data(); }
  // Queues host -> device on copy_: straight from one of our pinned buffers, else through `stage`.
  void upload(std::span<const float> host, PinnedFloats& stage, float* device_dst);
  void download_params(std::span<float> out);  // after the training stream's work so far

  int device_;
  float* params_;
  std::size_t n_;
  cudaStream_t training_;
  cuda::Stream copy_;
  PinnedFloats mixer_work_, mixer_base_, stage_a_, stage_b_;
  cuda::DeviceBuffer<float> work_, base_;
  StreamEvent uploaded_, computed_;
};

}  // namespace hearsay
