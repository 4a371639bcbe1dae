#include "kernels/cuda/activation.hpp"

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/launch.hpp"
#include "kernels/cuda/math/activation_math.hpp"

namespace hearsay::cuda {
namespace {

using detail::bad_value;
using detail::grid_for;
using detail::kThreads;
using detail::require_pointer;

// Threads per block of the bias gradient reductions (a power of two for the tree).
constexpr unsigned kRowsGradThreads = 512;
// bias_grad_cols: a tile of kColTile features (one warp across) by kColLanes row lanes.
constexpr unsigned kColTile = 32;
constexpr unsigned kColLanes = 32;
constexpr unsigned kColThreads = kColTile * kColLanes;

// Index arithmetic (a division per element) is much cheaper in 32 bits; the launchers use
// 32-bit indices whenever the grid-stride loop cannot overflow them.
constexpr std::size_t kMax32 = 0x7FFFFFFFu;

template <class Index>
__global__ void bias_act_rows_kernel(Index total, Index pixels, Index channels, const float* bias,
                                     bool relu_on, float* y) {
  const Index stride = static_cast<Index>(gridDim.x) * blockDim.x;
  for (Index e = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride)
    y[e] = bias_act(y[e], bias[channel_of(e, pixels, channels)], relu_on);
}

template <class Index>
__global__ void bias_act_cols_kernel(Index total, Index features, const float* bias, bool relu_on, float* y) {
  const Index stride = static_cast<Index>(gridDim.x) * blockDim.x;
  for (Index e = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride)
    y[e] = bias_act(y[e], bias[e % features], relu_on);
}

__global__ void relu_forward_kernel(std::size_t n, const float* x, float* y) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = relu(x[i]);
}

__global__ void relu_backward_kernel(std::size_t n, const float* y, const float* dy, float* dx) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dx[i] = relu_grad(y[i], dy[i]);
}

// One block per channel (grid-stride over channels): strided partial sums, then the
// fixed tree of tree_step.
__global__ void __launch_bounds__(kRowsGradThreads)
    bias_grad_rows_kernel(long batch, long channels, long pixels, const float* dy, float* db) {
  __shared__ float part[kRowsGradThreads];
  for (long c = blockIdx.x; c < channels; c += gridDim.x) {
    part[threadIdx.x] = bias_rows_partial(dy, batch, channels, pixels, c, threadIdx.x, kRowsGradThreads);
    __syncthreads();
    for (unsigned half = kRowsGradThreads / 2; half > 0; half /= 2) {
      if (threadIdx.x < half) tree_step(part, threadIdx.x, half);
      __syncthreads();
    }
    if (threadIdx.x == 0) db[c] = part[0];
    __syncthreads();  // part[0] is read before the next channel overwrites it
  }
}

// Block (kColTile, kColLanes): thread (x, y) sums rows y, y + kColLanes, ... of feature
// blockIdx.x * kColTile + x (a warp reads kColTile consecutive floats of one row), then
// the lanes of each feature are reduced by the fixed tree.
__global__ void __launch_bounds__(kColThreads)
    bias_grad_cols_kernel(long batch, long features, const float* dy, float* db) {
  __shared__ float part[kColTile][kColLanes + 1];  // +1: the tree's column walk hits distinct banks
  for (long tile = blockIdx.x; tile * kColTile < features; tile += gridDim.x) {
    const long f = tile * kColTile + threadIdx.x;
    part[threadIdx.x][threadIdx.y] =
        f < features ? bias_cols_partial(dy, batch, features, f, threadIdx.y, kColLanes) : 0.0f;
    __syncthreads();
    for (unsigned half = kColLanes / 2; half > 0; half /= 2) {
      if (threadIdx.y < half) tree_step(part[threadIdx.x], threadIdx.y, half);
      __syncthreads();
    }
    if (threadIdx.y == 0 && f < features) db[f] = part[threadIdx.x][0];
    __syncthreads();
  }
}

constexpr unsigned kMaxGridX = 0x7FFFFFFFu;
unsigned blocks_for_items(long items) {
  return static_cast<unsigned>(items < long{kMaxGridX} ? items : kMaxGridX);
}

}  // namespace

void bias_act_rows(long batch, int channels, long pixels, const float* bias, bool relu_on, float* y,
                   cudaStream_t stream) {
  constexpr const char* kName = "bias_act_rows";
  if (batch < 0) bad_value(kName, "batch", batch, ">= 0");
  if (channels < 0) bad_value(kName, "channels", channels, ">= 0");
  if (pixels < 0) bad_value(kName, "pixels", pixels, ">= 0");
  const auto total =
      static_cast<std::size_t>(batch) * static_cast<std::size_t>(channels) * static_cast<std::size_t>(pixels);
  if (total == 0) return;
  require_pointer(kName, "bias", bias);
  require_pointer(kName, "y", y);
  const unsigned grid = grid_for(total);
  if (total <= kMax32) {
    bias_act_rows_kernel<std::uint32_t>
        <<<grid, kThreads, 0, stream>>>(static_cast<std::uint32_t>(total), static_cast<std::uint32_t>(pixels),
                                        static_cast<std::uint32_t>(channels), bias, relu_on, y);
  } else {
    bias_act_rows_kernel<std::uint64_t><<<grid, kThreads, 0, stream>>>(
        total, static_cast<std::uint64_t>(pixels), static_cast<std::uint64_t>(channels), bias, relu_on, y);
  }
  HEARSAY_CUDA_CHECK(cudaGetLastError());
}

void bias_act_cols(long batch, int features, const float* bias, bool relu_on, float* y, cudaStream_t stream) {
  constexpr const char* kName = "bias_act_cols";
  if (batch < 0) bad_value(kName, "batch", batch, ">= 0");
  if (features < 0) bad_value(kName, "features", features, ">= 0");
  const auto total = static_cast<std::size_t>(batch) * static_cast<std::size_t>(features);
  if (total == 0) return;
  require_pointer(kName, "bias", bias);
  require_pointer(kName, "y", y);
  const unsigned grid = grid_for(total);
  if (total <= kMax32) {
    bias_act_cols_kernel<std::uint32_t><<<grid, kThreads, 0, stream>>>(
        static_cast<std::uint32_t>(total), static_cast<std::uint32_t>(features), bias, relu_on, y);
  } else {
    bias_act_cols_kernel<std::uint64_t>
        <<<grid, kThreads, 0, stream>>>(total, static_cast<std::uint64_t>(features), bias, relu_on, y);
  }
  HEARSAY_CUDA_CHECK(cudaGetLastError());
}

void relu_forward(long n, const float* x, float* y, cudaStream_t stream) {
  constexpr const char* kName = "relu_forward";
  if (n < 0) bad_value(kName, "n", n, ">= 0");
  if (n == 0) return;
  require_pointer(kName, "x", x);
  require_pointer(kName, "y", y);
  const auto count = static_cast<std::size_t>(n);
  relu_forward_kernel<<<grid_for(count), kThreads, 0, stream>>>(count, x, y);
  HEARSAY_CUDA_CHECK(cudaGetLastError());
}

void relu_backward(long n, const float* y, const float* dy, float* dx, cudaStream_t stream) {
  constexpr const char* kName = "relu_backward";
  if (n < 0) bad_value(kName, "n", n, ">= 0");
  if (n == 0) return;
  require_pointer(kName, "y", y);
  require_pointer(kName, "dy", dy);
  require_pointer(kName, "dx", dx);
  const auto count = static_cast<std::size_t>(n);
  relu_backward_kernel<<<grid_for(count), kThreads, 0, stream>>>(count, y, dy, dx);
  HEARSAY_CUDA_CHECK(cudaGetLastError());
}

void bias_grad_rows(long batch, int channels, long pixels, const float* dy, float* db, cudaStream_t stream) {
  constexpr const char* kName = "bias_grad_rows";
  if (batch < 0) bad_value(kName, "batch", batch, ">= 0");
  if (channels < 0) bad_value(kName, "channels", channels, ">= 0");
  if (pixels < 0) bad_value(kName, "pixels", pixels, ">= 0");
  if (channels == 0) return;
  require_pointer(kName, "db", db);
  if (batch > 0 && pixels > 0) require_pointer(kName, "dy", dy);
  bias_grad_rows_kernel<<<blocks_for_items(channels), kRowsGradThreads, 0, stream>>>(batch, channels, pixels,
                                                                                     dy, db);
  HEARSAY_CUDA_CHECK(cudaGetLastError());
}

void bias_grad_cols(long batch, int features, const float* dy, float* db, cudaStream_t stream) {
  constexpr const char* kName = "bias_grad_cols";
  if (batch < 0) bad_value(kName, "batch", batch, ">= 0");
  if (features < 0) bad_value(kName, "features", features, ">= 0");
  if (features == 0) return;
  require_pointer(kName, "db", db);
  if (batch > 0) require_pointer(kName, "dy", dy);
  const long tiles = (features + long{kColTile} - 1) / kColTile;
  bias_grad_cols_kernel<<<blocks_for_items(tiles), dim3(kColTile, kColLanes), 0, stream>>>(batch, features,
                                                                                           dy, db);
  HEARSAY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace hearsay::cuda
