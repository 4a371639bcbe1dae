// A Model's forward and backward passes on a CUDA device: the same layers, the same
// fusions (a ReLU applied in its producer's bias epilogue, its mask applied by a following
// average pool) and the same flat parameter layout as the CPU Workspace, with cuDNN for
// convolutions, cuBLAS for linear layers and kernels/cuda for the rest. Activations for
// batches up to max_batch live on the device; everything is queued on one stream.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cuda/blas.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/dnn.hpp"
#include "model/model.hpp"

namespace hearsay {

class CudaModelRunner {
 public:
  CudaModelRunner(const Model& model, std::int64_t max_batch, cudaStream_t stream);
  std::int64_t max_batch() const { return max_batch_; }

  // Runs the model on x [batch x input_floats] (device memory) with the parameters at
  // `params` (device, the model's flat layout); returns the logits [batch x classes] on
  // the device, valid until the next call.
  const float* forward(const float* params, const float* x, std::int64_t batch);
  // Where the loss writes its gradient for backward: [batch x classes].
  float* logits_grad() { return grad_a_.data(); }
  // Back-propagates logits_grad() (overwritten) through the last forward and writes the
  // whole parameter gradient into grads (device, param_count floats).
  void backward(const float* params, float* grads);

 private:
  void forward_layer(std::size_t i, const float* params, const float* x, float* y, std::int64_t batch);
  void backward_layer(std::size_t i, const float* params, const float* x, const float* y, float* dy,
                      float* dx, float* grads, std::int64_t batch);

  const Model& model_;
  std::int64_t max_batch_;
  cudaStream_t stream_;
  std::int64_t batch_ = 0;
  const float* input_ = nullptr;
  cuda::BlasHandle blas_;
  cuda::DnnHandle dnn_;
  cuda::ConvPlanCache plans_;
  std::vector<cuda::DeviceBuffer<float>> outputs_;  // per layer; fused-away ReLUs share their producer's
  std::vector<float*> output_ptr_;
  cuda::DeviceBuffer<float> grad_a_, grad_b_;
};

}  // namespace hearsay
