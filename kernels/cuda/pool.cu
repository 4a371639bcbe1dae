#include "kernels/cuda/pool.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/launch.hpp"
#include "kernels/cuda/math/pool_math.hpp"

namespace hearsay::cuda {
namespace {

using detail::grid_for;
using detail::kThreads;
using detail::require_pointer;

// The four operations differ only in the per-element function; one kernel template runs
// any of them over `total` elements of `planes` planes of `rows` x `cols` (the output
// plane for a forward pass, the input plane for a backward one).
enum class Op { avg_forward, avg_backward, max_forward, max_backward };

struct PoolArgs {
  PoolDims d;
  const float* x;     // forward input; max_backward's x
  const float* dy;    // backward passes' gradient input
  const float* mask;  // avg_backward's ReLU output, or null
  float* out;
};

template <Op op, class Index>
__global__ void pool_kernel(PoolArgs a, Index total) {
  const PoolDims& d = a.d;
  const Index in_plane = static_cast<Index>(d.height) * static_cast<Index>(d.width);
  const Index out_plane = static_cast<Index>(d.out_h) * static_cast<Index>(d.out_w);
  const bool forward = op == Op::avg_forward || op == Op::max_forward;
  const Index plane_size = forward ? out_plane : in_plane;
  const Index cols = forward ? static_cast<Index>(d.out_w) : static_cast<Index>(d.width);
  const Index stride = static_cast<Index>(gridDim.x) * blockDim.x;
  for (Index e = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const Index p = e / plane_size, r = e % plane_size;
    const int row = static_cast<int>(r / cols), col = static_cast<int>(r % cols);
    float v;
    if constexpr (op == Op::avg_forward) {
      v = avgpool_forward_at(d, a.x + p * in_plane, row, col);
    } else if constexpr (op == Op::max_forward) {
      v = maxpool_forward_at(d, a.x + p * in_plane, row, col);
    } else if constexpr (op == Op::avg_backward) {
      v = avgpool_backward_at(d, a.dy + p * out_plane, a.mask ? a.mask + p * in_plane : nullptr, row, col);
    } else {
      v = maxpool_backward_at(d, a.x + p * in_plane, a.dy + p * out_plane, row, col);
    }
    a.out[e] = v;
  }
}

// Checks the geometry and planes; returns false when there is nothing to do.
bool check_shape(const char* name, const cpu::PoolGeometry& g, long planes) {
  if (g.kernel < 1) detail::bad_value(name, "kernel", g.kernel, ">= 1");
  if (g.stride < 1) detail::bad_value(name, "stride", g.stride, ">= 1");
  if (g.height < g.kernel || g.width < g.kernel)
    detail::bad_argument(name, "plane " + std::to_string(g.height) + "x" + std::to_string(g.width) +
                                   " is smaller than the window " + std::to_string(g.kernel));
  if (planes < 0) detail::bad_value(name, "planes", planes, ">= 0");
  return planes > 0;
}

template <Op op>
void launch(const cpu::PoolGeometry& g, long planes, const PoolArgs& args, cudaStream_t stream) {
  const bool forward = op == Op::avg_forward || op == Op::max_forward;
  const std::size_t plane_size = forward ? static_cast<std::size_t>(args.d.out_h) * args.d.out_w
                                         : static_cast<std::size_t>(g.height) * g.width;
  const std::size_t total = static_cast<std::size_t>(planes) * plane_size;
  // 32-bit index arithmetic (several divisions per element) when the grid-stride loop
  // cannot overflow it, including the plane offsets p * in_plane.
  const std::size_t largest = static_cast<std::size_t>(planes) * g.height * g.width + total;
  const unsigned grid = grid_for(total);
  if (largest <= 0x7FFFFFFFu) {
    pool_kernel<op, std::uint32_t><<<grid, kThreads, 0, stream>>>(args, static_cast<std::uint32_t>(total));
  } else {
    pool_kernel<op, std::uint64_t><<<grid, kThreads, 0, stream>>>(args, static_cast<std::uint64_t>(total));
  }
  HEARSAY_CUDA_CHECK(cudaGetLastError());
}

PoolDims dims_of(const cpu::PoolGeometry& g) { return pool_dims(g.height, g.width, g.kernel, g.stride); }

}  // namespace

void avgpool_forward(const cpu::PoolGeometry& g, long planes, const float* x, float* y, cudaStream_t stream) {
  constexpr const char* kName = "avgpool_forward";
  if (!check_shape(kName, g, planes)) return;
  require_pointer(kName, "x", x);
  require_pointer(kName, "y", y);
  launch<Op::avg_forward>(g, planes, PoolArgs{dims_of(g), x, nullptr, nullptr, y}, stream);
}

void avgpool_backward(const cpu::PoolGeometry& g, long planes, const float* dy, float* dx,
                      const float* relu_output, cudaStream_t stream) {
  constexpr const char* kName = "avgpool_backward";
  if (!check_shape(kName, g, planes)) return;
  require_pointer(kName, "dy", dy);
  require_pointer(kName, "dx", dx);
  launch<Op::avg_backward>(g, planes, PoolArgs{dims_of(g), nullptr, dy, relu_output, dx}, stream);
}

void maxpool_forward(const cpu::PoolGeometry& g, long planes, const float* x, float* y, cudaStream_t stream) {
  constexpr const char* kName = "maxpool_forward";
  if (!check_shape(kName, g, planes)) return;
  require_pointer(kName, "x", x);
  require_pointer(kName, "y", y);
  launch<Op::max_forward>(g, planes, PoolArgs{dims_of(g), x, nullptr, nullptr, y}, stream);
}

void maxpool_backward(const cpu::PoolGeometry& g, long planes, const float* x, const float* dy, float* dx,
                      cudaStream_t stream) {
  constexpr const char* kName = "maxpool_backward";
  if (!check_shape(kName, g, planes)) return;
  require_pointer(kName, "x", x);
  require_pointer(kName, "dy", dy);
  require_pointer(kName, "dx", dx);
  launch<Op::max_backward>(g, planes, PoolArgs{dims_of(g), x, dy, nullptr, dx}, stream);
}

}  // namespace hearsay::cuda
