// A Model's forward and backward passes on a CUDA device: the same layers, the same
// fusions (a ReLU applied in its producer's epilogue, its mask applied by a following
// average pool) and the same flat state layout as the CPU Workspace, with cuDNN for
// convolutions and BatchNorm, cuBLAS for linear layers and kernels/cuda for the rest
// (model/cuda/cuda_layer_ops.hpp runs the convolutions, BatchNorms and residual blocks).
// Activations for batches up to max_batch live on the device, and so does each layer's
// scratch (cuda_scratch_layout.hpp), kept from its forward to its backward; everything is
// queued on one stream.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/device.hpp"
#include "model/cuda/cuda_layer_ops.hpp"
#include "model/model.hpp"

namespace hearsay {

class CudaModelRunner {
 public:
  CudaModelRunner(const Model& model, std::int64_t max_batch, cudaStream_t stream);
  std::int64_t max_batch() const { return max_batch_; }

  // Runs the model on x [batch x input_floats] (device memory) with the state at `state`
  // (device, the model's flat layout: parameters, then buffers); returns the logits
  // [batch x classes] on the device, valid until the next call. A training pass
  // (Pass::train) moves BatchNorm's running statistics and counters in `state`; an
  // evaluation pass normalises with them.
  const float* forward(float* state, const float* x, std::int64_t batch, Pass pass);
  // Where the loss writes its gradient for backward: [batch x classes].
  float* logits_grad() { return grad_a_.data(); }
  // Back-propagates logits_grad() (overwritten) through the last forward, which must have
  // been a training pass when the model has BatchNorm, and writes the whole parameter
  // gradient into grads (device, param_count floats).
  void backward(const float* state, float* grads);

 private:
  void forward_layer(std::size_t i, float* state, const float* x, float* y, std::int64_t batch);
  void backward_layer(std::size_t i, const float* state, const float* x, const float* y, float* dy, float* dx,
                      float* grads, std::int64_t batch);
  float* scratch_of(std::size_t i) { return scratch_.data() + scratch_offset_[i]; }

  const Model& model_;
  std::int64_t max_batch_;
  cudaStream_t stream_;
  std::int64_t batch_ = 0;
  Pass pass_ = Pass::train;
  const float* input_ = nullptr;
  CudaLayerOps ops_;
  std::vector<cuda::DeviceBuffer<float>> outputs_;  // per layer; fused-away ReLUs share their producer's
  std::vector<float*> output_ptr_;
  cuda::DeviceBuffer<float> grad_a_, grad_b_, scratch_;
  std::vector<std::int64_t> scratch_offset_;  // per layer, into scratch_
};

}  // namespace hearsay
