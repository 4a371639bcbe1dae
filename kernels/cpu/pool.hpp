// 2-D pooling over NCHW planes, no padding (window k, stride s). Each function works on
// `planes` = N*C independent H x W planes.
#pragma once

namespace hearsay::cpu {

struct PoolGeometry {
  int height, width, kernel, stride;
  int out_h() const { return (height - kernel) / stride + 1; }
  int out_w() const { return (width - kernel) / stride + 1; }
};

void avgpool_forward(const PoolGeometry& g, long planes, const float* x, float* y);
// dx is overwritten; windows may overlap (stride < kernel), so it is accumulated.
// relu_output, when not null, is the pool's input as a ReLU produced it: dx is then
// zeroed where it is <= 0, which is that ReLU's backward fused into this pass.
void avgpool_backward(const PoolGeometry& g, long planes, const float* dy, float* dx,
                      const float* relu_output = nullptr);
void maxpool_forward(const PoolGeometry& g, long planes, const float* x, float* y);
// The gradient goes to the first maximum of each window (as in PyTorch); the max is
// recomputed from x rather than stored, which costs less than writing indices.
void maxpool_backward(const PoolGeometry& g, long planes, const float* x, const float* dy, float* dx);

}  // namespace hearsay::cpu
