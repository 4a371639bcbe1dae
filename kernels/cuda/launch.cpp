#include "kernels/cuda/launch.hpp"

#include <cuda_runtime_api.h>

#include <stdexcept>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/math/grid_math.hpp"

namespace hearsay::cuda::detail {

unsigned grid_for(std::size_t work, unsigned threads) {
  int device = 0;
  HEARSAY_CUDA_CHECK(cudaGetDevice(&device));
  int sms = 0;
  HEARSAY_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return grid_blocks(work, threads, sms);
}

void bad_argument(const char* launcher, const std::string& message) {
  throw std::invalid_argument(std::string("hearsay::cuda::") + launcher + ": " + message);
}

StreamFlag::StreamFlag(cudaStream_t stream) : stream_(stream) {
  void* p = nullptr;
  HEARSAY_CUDA_CHECK(cudaMallocAsync(&p, sizeof(unsigned), stream));
  flag_ = static_cast<unsigned*>(p);
  const cudaError_t zeroed = cudaMemsetAsync(flag_, 0, sizeof(unsigned), stream);
  if (zeroed != cudaSuccess) {
    (void)cudaFreeAsync(flag_, stream);  // the destructor does not run for a throwing constructor
    flag_ = nullptr;
    HEARSAY_CUDA_CHECK(zeroed);
  }
}

StreamFlag::~StreamFlag() {
  // Clear only our own failure (e.g. after a sticky launch error), never throw.
  if (flag_ != nullptr && cudaFreeAsync(flag_, stream_) != cudaSuccess) (void)cudaGetLastError();
}

unsigned StreamFlag::read() {
  unsigned value = 0;
  HEARSAY_CUDA_CHECK(cudaMemcpyAsync(&value, flag_, sizeof value, cudaMemcpyDeviceToHost, stream_));
  HEARSAY_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return value;
}

}  // namespace hearsay::cuda::detail
