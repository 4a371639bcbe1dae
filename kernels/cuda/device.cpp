#include "kernels/cuda/device.hpp"

#include <cstdio>

namespace hearsay::cuda {

int device_count_or_zero(std::string& reason) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    // No driver, no GPU, or a driver too old for this runtime: report 0, and clear the
    // (non-sticky) error so that it does not surface in a later cudaGetLastError.
    (void)cudaGetLastError();
    reason = cuda_status_text(status);
    return 0;
  }
  if (count <= 0) {
    reason = "no CUDA device";
    return 0;
  }
  reason.clear();
  return count;
}

int device_count_or_zero() {
  std::string reason;
  return device_count_or_zero(reason);
}

std::string describe_device(int device) {
  cudaDeviceProp prop{};
  HEARSAY_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  char buf[512];
  std::snprintf(buf, sizeof buf, "device %d: %s, sm_%d%d, %d SMs, %.1f GiB, PCI %04x:%02x:%02x.0", device,
                prop.name, prop.major, prop.minor, prop.multiProcessorCount,
                static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0),
                static_cast<unsigned>(prop.pciDomainID), static_cast<unsigned>(prop.pciBusID),
                static_cast<unsigned>(prop.pciDeviceID));
  return buf;
}

Stream::Stream() { HEARSAY_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }

Stream::~Stream() { destroy(); }

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    destroy();
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

void Stream::synchronize() const { HEARSAY_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

void Stream::destroy() noexcept {
  if (stream_ != nullptr) {
    if (cudaStreamDestroy(stream_) != cudaSuccess) (void)cudaGetLastError();
  }
  stream_ = nullptr;
}

}  // namespace hearsay::cuda
