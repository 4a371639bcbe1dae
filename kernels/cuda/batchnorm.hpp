// cuDNN's BatchNorm for the BatchNorm2d layer, in spatial mode (one mean and variance per
// channel, over N x H x W), with PyTorch's semantics: a training pass normalises with the
// batch's mean and biased variance and moves the running statistics by
// running = (1 - momentum) running + momentum batch, the variance taken unbiased
// (M / (M - 1) times the biased one, M = N x H x W), which is what cuDNN's running variance
// is; an evaluation pass normalises with the running statistics. A BatchNormPlan holds the
// descriptors of one input shape (kernels/cuda/batchnorm_layout.hpp, tested on the host);
// BatchNormPlanCache hands a layer its plan per shape. All methods are asynchronous on the
// handle's current stream and overwrite their outputs; pointers are device pointers to fp32;
// per-channel arrays hold C floats. Precision: fp32 throughout, sums in cuDNN's order.
#pragma once
#include <map>
#include <memory>

#include "kernels/cuda/batchnorm_layout.hpp"
#include "kernels/cuda/dnn.hpp"

namespace hearsay::cuda {

class BatchNormPlan {
 public:
  // Throws CudaError for cuDNN failures, std::logic_error when cuDNN derives another
  // per-channel shape than batchnorm_param_dims.
  BatchNormPlan(DnnHandle& handle, const BatchNormDescriptors& d);
  BatchNormPlan(const BatchNormPlan&) = delete;
  BatchNormPlan& operator=(const BatchNormPlan&) = delete;

  // y = gamma (x - mean) / sqrt(var + eps) + beta with the batch's mean and biased
  // variance; writes them for backward as save_mean and save_invstd (1 / sqrt(var + eps)).
  // running_mean and running_var: moved by `momentum` as above, or both null (a replica's
  // pass, which leaves them alone). Throws std::invalid_argument when the batch has fewer
  // than two values per channel (as the CPU layer does), or for a null pointer.
  void forward_train(const float* x, float* y, const float* gamma, const float* beta, double momentum,
                     double eps, float* running_mean, float* running_var, float* save_mean,
                     float* save_invstd);
  // y = gamma (x - running_mean) / sqrt(running_var + eps) + beta.
  void forward_eval(const float* x, float* y, const float* gamma, const float* beta,
                    const float* running_mean, const float* running_var, double eps);
  // The backward of a training pass, from its saved statistics (and the same eps):
  // dgamma = sum dy xhat, dbeta = sum dy, dx = gamma invstd (dy - mean(dy) - xhat mean(dy xhat)).
  // dx must not be dy.
  void backward(const float* x, const float* dy, float* dx, const float* gamma, float* dgamma, float* dbeta,
                double eps, const float* save_mean, const float* save_invstd);

  const BatchNormDescriptors& layout() const noexcept { return layout_; }

 private:
  DnnHandle& handle_;
  BatchNormDescriptors layout_;
  detail::TensorDesc x_desc_, param_desc_;
};

// The plans of one handle, one per input shape (an epoch's smaller last batch gets its
// own), made on first use and kept; references stay valid for the cache's lifetime.
class BatchNormPlanCache {
 public:
  explicit BatchNormPlanCache(DnnHandle& handle) : handle_(handle) {}
  BatchNormPlanCache(const BatchNormPlanCache&) = delete;
  BatchNormPlanCache& operator=(const BatchNormPlanCache&) = delete;

  BatchNormPlan& plan(const BatchNormDescriptors& d);
  std::size_t size() const noexcept { return plans_.size(); }

 private:
  DnnHandle& handle_;
  std::map<BatchNormPlanKey, std::unique_ptr<BatchNormPlan>> plans_;
};

}  // namespace hearsay::cuda
