#include "kernels/cuda/gather.hpp"

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/launch.hpp"

namespace hearsay::cuda {
namespace {

using detail::grid_for;
using detail::kThreads;
using detail::require_aligned;
using detail::require_pointer;

// The most blocks along y (CUDA's limit is 65535); rows past it are covered by a stride.
constexpr long kMaxRowBlocks = 65535;

// Blocks along y walk the rows; threads along x copy a row in units of T (float4 when
// every row starts on a 16-byte boundary, else float), coalesced on both sides.
template <class T>
__global__ void gather_rows_kernel(long rows, long row_units, const T* __restrict__ src,
                                   const std::int64_t* __restrict__ indices, T* __restrict__ dst) {
  for (long i = blockIdx.y; i < rows; i += gridDim.y) {
    const T* from = src + indices[i] * row_units;
    T* to = dst + i * row_units;
    for (long j = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x; j < row_units;
         j += static_cast<long>(gridDim.x) * blockDim.x)
      to[j] = from[j];
  }
}

__global__ void gather_labels_kernel(long rows, const std::uint8_t* __restrict__ src,
                                     const std::int64_t* __restrict__ indices,
                                     std::uint8_t* __restrict__ dst) {
  const long stride = static_cast<long>(gridDim.x) * blockDim.x;
  for (long i = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x; i < rows; i += stride)
    dst[i] = src[indices[i]];
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace

void gather_rows(long rows, long row_floats, const float* src, const std::int64_t* indices, float* dst,
                 cudaStream_t stream) {
  constexpr const char* kName = "gather_rows";
  if (rows < 0) detail::bad_value(kName, "rows", rows, ">= 0");
  if (row_floats < 0) detail::bad_value(kName, "row_floats", row_floats, ">= 0");
  if (rows == 0 || row_floats == 0) return;
  require_pointer(kName, "src", src);
  require_pointer(kName, "indices", indices);
  require_pointer(kName, "dst", dst);
  require_aligned(kName, "src", src, alignof(float));
  require_aligned(kName, "indices", indices, alignof(std::int64_t));
  require_aligned(kName, "dst", dst, alignof(float));
  const bool vec4 = row_floats % 4 == 0 && aligned16(src) && aligned16(dst);
  const long units = vec4 ? row_floats / 4 : row_floats;
  const dim3 grid(static_cast<unsigned>((units + kThreads - 1) / kThreads),
                  static_cast<unsigned>(rows < kMaxRowBlocks ? rows : kMaxRowBlocks));
  if (vec4) {
    gather_rows_kernel<float4><<<grid, kThreads, 0, stream>>>(
        rows, units, reinterpret_cast<const float4*>(src), indices, reinterpret_cast<float4*>(dst));
  } else {
    gather_rows_kernel<float><<<grid, kThreads, 0, stream>>>(rows, units, src, indices, dst);
  }
  HEARSAY_CUDA_CHECK(cudaGetLastError());
}

void gather_labels(long rows, const std::uint8_t* src, const std::int64_t* indices, std::uint8_t* dst,
                   cudaStream_t stream) {
  constexpr const char* kName = "gather_labels";
  if (rows < 0) detail::bad_value(kName, "rows", rows, ">= 0");
  if (rows == 0) return;
  require_pointer(kName, "src", src);
  require_pointer(kName, "indices", indices);
  require_pointer(kName, "dst", dst);
  require_aligned(kName, "indices", indices, alignof(std::int64_t));
  const auto count = static_cast<std::size_t>(rows);
  gather_labels_kernel<<<grid_for(count), kThreads, 0, stream>>>(rows, src, indices, dst);
  HEARSAY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace hearsay::cuda
