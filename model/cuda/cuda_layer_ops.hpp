// The layers whose CUDA pass takes more than one library call: Conv2d (cuDNN, then its bias
// and fused ReLU, or the ReLU alone without a bias), BatchNorm2d (cuDNN, its fused ReLU and
// the batch counter) and the BasicBlock (its parts one by one, as BasicBlock::forward and
// backward run them on the CPU). State pointers are the device copy of the model's flat
// state (parameters, then buffers) at the layers' own offsets; grads is the device gradient
// (param_count floats). Everything is queued on the stream the object was made with.
//
// The fused ReLU's backward mask of a top-level layer is the caller's (CudaModelRunner
// applies it, as for every layer); the block applies the masks of its parts itself.
#pragma once
#include <cuda_runtime_api.h>

#include "kernels/cuda/batchnorm.hpp"
#include "kernels/cuda/blas.hpp"
#include "kernels/cuda/dnn.hpp"
#include "model/layer.hpp"
#include "model/layers/batchnorm2d.hpp"
#include "model/layers/conv2d.hpp"
#include "model/layers/residual.hpp"

namespace hearsay {

class CudaLayerOps {
 public:
  explicit CudaLayerOps(cudaStream_t stream);
  CudaLayerOps(const CudaLayerOps&) = delete;
  CudaLayerOps& operator=(const CudaLayerOps&) = delete;

  cuda::BlasHandle& blas() { return blas_; }
  cudaStream_t stream() const { return stream_; }

  void conv_forward(const Conv2d& conv, const Shape& in, const float* state, const float* x, float* y);
  // Writes the layer's parameter gradient, and dx unless it is null.
  void conv_backward(const Conv2d& conv, const Shape& in, const float* state, const float* x, const float* dy,
                     float* dx, float* grads);

  // stats: the layer's scratch (batchnorm_stats_floats), written by a training pass. A
  // training pass also moves the running statistics and counts the batch; a replica's pass
  // does neither; an evaluation pass normalises with the running statistics.
  void batchnorm_forward(const BatchNorm2d& bn, const Shape& in, float* state, const float* x, float* y,
                         float* stats, Pass pass);
  // The backward of the last forward, which must have been a training or replica pass
  // (std::logic_error after an evaluation pass: the GPU never trains from one). dx is
  // required (cuDNN writes it) and must not be dy.
  void batchnorm_backward(const BatchNorm2d& bn, const Shape& in, const float* state, const float* x,
                          const float* dy, float* dx, float* grads, const float* stats, Pass pass);

  // scratch: the block's regions (BlockScratchLayout for this input shape), kept from
  // forward to backward. backward overwrites dy; dx may be null.
  void block_forward(const BasicBlock& block, const Shape& in, float* state, const float* x, float* y,
                     float* scratch, Pass pass);
  void block_backward(const BasicBlock& block, const Shape& in, const float* state, const float* x,
                      const float* y, float* dy, float* dx, float* grads, float* scratch, Pass pass);

 private:
  cudaStream_t stream_;
  cuda::BlasHandle blas_;
  cuda::DnnHandle dnn_;
  cuda::ConvPlanCache conv_plans_;
  cuda::BatchNormPlanCache bn_plans_;
};

}  // namespace hearsay
