// Device queries and RAII owners for device memory and streams. Plain C++ against the
// CUDA runtime API: usable from .cpp files compiled by the host compiler.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "kernels/cuda/check.hpp"

namespace hearsay::cuda {

// Number of visible CUDA devices; 0 (never an exception) when there is no driver, no GPU
// or the runtime cannot initialise, so that callers and tests can skip cleanly.
int device_count_or_zero();
// Same, and on 0 devices `reason` says why (the runtime's status, or "no CUDA device").
int device_count_or_zero(std::string& reason);

// One line for logs: "device 0: NVIDIA H100 80GB HBM3, sm_90, 132 SMs, 79.1 GiB, PCI 0000:1b:00.0".
// Throws CudaError for an invalid ordinal.
std::string describe_device(int device);

// Owns `size()` elements of T in device memory (cudaMalloc/cudaFree). Non-copyable,
// movable; the destructor never throws. Allocation is on the current device.
template <class T>
class DeviceBuffer {
  static_assert(std::is_trivially_copyable_v<T>, "DeviceBuffer holds raw bytes copied with cudaMemcpy");

 public:
  DeviceBuffer() noexcept = default;
  explicit DeviceBuffer(std::size_t count) : size_(count) {
    if (count == 0) return;
    if (count > static_cast<std::size_t>(-1) / sizeof(T)) throw std::length_error("DeviceBuffer: size overflow");
    void* p = nullptr;
    HEARSAY_CUDA_CHECK(cudaMalloc(&p, count * sizeof(T)));
    data_ = static_cast<T*>(p);
  }
  ~DeviceBuffer() { reset(); }

  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }

  // Frees the memory now. A failing cudaFree (e.g. after a sticky launch error) is
  // swallowed: there is nothing a destructor could do about it.
  void reset() noexcept {
    if (data_ != nullptr) {
      // Clear only our own failure, never someone else's pending error.
      if (cudaFree(data_) != cudaSuccess) (void)cudaGetLastError();
    }
    data_ = nullptr;
    size_ = 0;
  }

  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  std::size_t bytes() const noexcept { return size_ * sizeof(T); }
  bool empty() const noexcept { return size_ == 0; }

  // Synchronous copies of `src.size()` / `dst.size()` elements starting at element `offset`.
  // From pageable memory cudaMemcpy returns once the source is staged, before the data
  // lands, and our Streams do not wait for the legacy stream it runs on: the copy is
  // waited for, so that a kernel launched next on any stream reads what was copied.
  void copy_from_host(std::span<const T> src, std::size_t offset = 0) {
    check_range(offset, src.size());
    if (src.empty()) return;
    HEARSAY_CUDA_CHECK(cudaMemcpy(data_ + offset, src.data(), src.size_bytes(), cudaMemcpyHostToDevice));
    HEARSAY_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
  }
  void copy_to_host(std::span<T> dst, std::size_t offset = 0) const {
    check_range(offset, dst.size());
    if (dst.empty()) return;
    HEARSAY_CUDA_CHECK(cudaMemcpy(dst.data(), data_ + offset, dst.size_bytes(), cudaMemcpyDeviceToHost));
  }

 private:
  void check_range(std::size_t offset, std::size_t count) const {
    if (offset > size_ || count > size_ - offset) throw std::out_of_range("DeviceBuffer: copy out of range");
  }

  T* data_ = nullptr;
  std::size_t size_ = 0;
};

// Owns a non-blocking cudaStream_t (does not synchronise with the legacy default
// stream). Non-copyable, movable; the destructor never throws. A moved-from Stream holds
// no stream and get() returns nullptr, i.e. the default stream.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}
  Stream& operator=(Stream&& other) noexcept;

  cudaStream_t get() const noexcept { return stream_; }
  operator cudaStream_t() const noexcept { return stream_; }
  // Blocks until all work queued on the stream is done; throws CudaError on failure
  // (including asynchronous errors from kernels that ran on it).
  void synchronize() const;

 private:
  void destroy() noexcept;
  cudaStream_t stream_ = nullptr;
};

}  // namespace hearsay::cuda
