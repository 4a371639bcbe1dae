// Fused softmax + cross-entropy over logits [batch x classes].
#pragma once
#include <cstdint>

namespace hearsay::cpu {

struct XentResult {
  double loss_sum = 0;  // sum over the batch of -log softmax(logits)[label]
  long correct = 0;     // argmax(logits) == label
};

// Computes the loss with the max subtracted (no overflow for large logits) and, when
// dlogits is not null, dlogits = (softmax - onehot(label)) * grad_scale, where
// grad_scale is 1/global_batch for a mean loss. Labels must be < classes (checked by
// the caller when data is loaded).
XentResult softmax_xent(long batch, int classes, const float* logits, const std::uint8_t* labels,
                        float grad_scale, float* dlogits);

}  // namespace hearsay::cpu
