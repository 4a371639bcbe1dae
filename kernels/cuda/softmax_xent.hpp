// Fused softmax + cross-entropy over logits [batch x classes] on the device:
// cpu::softmax_xent's formula (kernels/cuda/math/xent_math.hpp holds the per-row
// arithmetic), with the batch's totals reduced on the device in a fixed order, so the
// same inputs always give the same sums.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace hearsay::cuda {

// Running totals in device memory, added to by softmax_xent. The caller zeroes them
// (cudaMemsetAsync) when starting a new total and copies them back when it needs them.
struct XentSums {
  double loss_sum;    // sum over rows of -log softmax(logits)[label]
  long long correct;  // rows whose first argmax is the label
};

// Floats of device scratch that softmax_xent needs for `batch` rows (per-row losses in
// double, per-row hits, and room to align the doubles).
std::size_t softmax_xent_scratch_floats(long batch);

// Per row: the loss and whether argmax == label into `scratch`, and when dlogits is not
// null dlogits = (softmax - onehot(label)) * grad_scale; then one block reduces the rows in
// a fixed order and ADDS the batch's totals to *sums. Asynchronous on `stream`.
// logits, labels (uint8, one per row), dlogits, scratch (softmax_xent_scratch_floats(batch)
// floats, 4-byte aligned) and sums are device pointers. Labels must be < classes: they are
// checked when the data is loaded, and not here (a larger label reads past its row).
// batch == 0 launches nothing (null pointers are then fine). Throws std::invalid_argument
// for batch < 0, classes < 1, a null pointer (dlogits aside) or a misaligned one, and
// CudaError when the launch fails.
void softmax_xent(long batch, int classes, const float* logits, const std::uint8_t* labels, float grad_scale,
                  float* dlogits, float* scratch, XentSums* sums, cudaStream_t stream);

}  // namespace hearsay::cuda
