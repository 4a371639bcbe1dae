#include "kernels/cuda/softmax_xent.hpp"

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/launch.hpp"
#include "kernels/cuda/math/xent_math.hpp"

namespace hearsay::cuda {
namespace {

using detail::grid_for;
using detail::kThreads;
using detail::require_pointer;

// Threads of the single block that reduces the rows (a power of two for the tree).
constexpr unsigned kSumThreads = 512;

// The scratch layout: `batch` doubles (losses), then `batch` floats (hits, 0 or 1).
struct Scratch {
  double* loss;
  float* hit;
};

Scratch layout(float* scratch, long batch) {
  // A 4-byte aligned pointer is one float short of 8-byte alignment at most; the scratch
  // size has that float spare.
  float* base = scratch + (reinterpret_cast<std::uintptr_t>(scratch) % alignof(double) != 0 ? 1 : 0);
  return Scratch{reinterpret_cast<double*>(base), base + 2 * batch};
}

// One thread per row: classes is small (labels are uint8) and the row is the unit of the
// CPU formula, which this keeps step for step.
__global__ void xent_rows_kernel(long batch, int classes, const float* logits, const std::uint8_t* labels,
                                 float grad_scale, float* dlogits, Scratch out) {
  const long stride = static_cast<long>(gridDim.x) * blockDim.x;
  for (long i = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x; i < batch; i += stride) {
    const long row = i * classes;
    const XentRow r =
        xent_row(classes, logits + row, labels[i], grad_scale, dlogits ? dlogits + row : nullptr);
    out.loss[i] = r.loss;
    out.hit[i] = static_cast<float>(r.correct);
  }
}

// One block: thread t sums rows t, t + kSumThreads, ... in order, then the fixed tree;
// thread 0 adds the totals to *sums (the only writer, so no atomics).
__global__ void __launch_bounds__(kSumThreads) xent_sum_kernel(long batch, Scratch in, XentSums* sums) {
  __shared__ double loss[kSumThreads];
  __shared__ long long hits[kSumThreads];
  double l = 0.0;
  long long h = 0;
  for (long i = threadIdx.x; i < batch; i += kSumThreads) {
    l += in.loss[i];
    h += static_cast<long long>(in.hit[i]);
  }
  loss[threadIdx.x] = l;
  hits[threadIdx.x] = h;
  __syncthreads();
  for (unsigned half = kSumThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      tree_step(loss, threadIdx.x, half);
      tree_step(hits, threadIdx.x, half);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    sums->loss_sum += loss[0];
    sums->correct += hits[0];
  }
}

}  // namespace

std::size_t softmax_xent_scratch_floats(long batch) {
  return batch > 0 ? 3 * static_cast<std::size_t>(batch) + 1 : 0;
}

void softmax_xent(long batch, int classes, const float* logits, const std::uint8_t* labels, float grad_scale,
                  float* dlogits, float* scratch, XentSums* sums, cudaStream_t stream) {
  constexpr const char* kName = "softmax_xent";
  if (batch < 0) detail::bad_value(kName, "batch", batch, ">= 0");
  if (classes < 1) detail::bad_value(kName, "classes", classes, ">= 1");
  if (batch == 0) return;
  require_pointer(kName, "logits", logits);
  require_pointer(kName, "labels", labels);
  require_pointer(kName, "scratch", scratch);
  require_pointer(kName, "sums", sums);
  detail::require_aligned(kName, "logits", logits, alignof(float));
  detail::require_aligned(kName, "scratch", scratch, alignof(float));
  detail::require_aligned(kName, "sums", sums, alignof(XentSums));
  if (dlogits != nullptr) detail::require_aligned(kName, "dlogits", dlogits, alignof(float));
  const Scratch s = layout(scratch, batch);
  xent_rows_kernel<<<grid_for(static_cast<std::size_t>(batch)), kThreads, 0, stream>>>(
      batch, classes, logits, labels, grad_scale, dlogits, s);
  HEARSAY_CUDA_CHECK(cudaGetLastError());
  xent_sum_kernel<<<1, kSumThreads, 0, stream>>>(batch, s, sums);
  HEARSAY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace hearsay::cuda
