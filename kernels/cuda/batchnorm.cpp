#include "kernels/cuda/batchnorm.hpp"

#include <initializer_list>
#include <stdexcept>
#include <string>

namespace hearsay::cuda {

namespace {

constexpr cudnnBatchNormMode_t kMode = CUDNN_BATCHNORM_SPATIAL;

void require_pointers(const char* what, std::initializer_list<const void*> pointers) {
  for (const void* p : pointers)
    if (p == nullptr)
      throw std::invalid_argument(std::string("BatchNormPlan::") + what + ": null device pointer");
}

std::string dims_text(int n, int c, int h, int w) {
  return std::to_string(n) + "x" + std::to_string(c) + "x" + std::to_string(h) + "x" + std::to_string(w);
}

}  // namespace

BatchNormPlan::BatchNormPlan(DnnHandle& handle, const BatchNormDescriptors& d) : handle_(handle), layout_(d) {
  cudnnTensorDescriptor_t t = nullptr;
  HEARSAY_CUDNN_CHECK(cudnnCreateTensorDescriptor(&t));
  x_desc_.reset(t);
  HEARSAY_CUDNN_CHECK(cudnnSetTensor4dDescriptorEx(x_desc_.get(), CUDNN_DATA_FLOAT, d.n, d.c, d.h, d.w,
                                                   d.strides[0], d.strides[1], d.strides[2], d.strides[3]));
  HEARSAY_CUDNN_CHECK(cudnnCreateTensorDescriptor(&t));
  param_desc_.reset(t);
  HEARSAY_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(param_desc_.get(), x_desc_.get(), kMode));
  // The per-channel arrays the layer passes are C packed floats: cuDNN must agree.
  cudnnDataType_t type{};
  int n = 0, c = 0, h = 0, w = 0, sn = 0, sc = 0, sh = 0, sw = 0;
  HEARSAY_CUDNN_CHECK(
      cudnnGetTensor4dDescriptor(param_desc_.get(), &type, &n, &c, &h, &w, &sn, &sc, &sh, &sw));
  const auto want = batchnorm_param_dims(d);
  if (type != CUDNN_DATA_FLOAT || n != want[0] || c != want[1] || h != want[2] || w != want[3] || sc != 1)
    throw std::logic_error("BatchNormPlan: cuDNN derived a " + dims_text(n, c, h, w) +
                           " per-channel tensor (channel stride " + std::to_string(sc) + ") for input " +
                           dims_text(d.n, d.c, d.h, d.w));
}

void BatchNormPlan::forward_train(const float* x, float* y, const float* gamma, const float* beta,
                                  double momentum, double eps, float* running_mean, float* running_var,
                                  float* save_mean, float* save_invstd) {
  require_pointers("forward_train", {x, y, gamma, beta, save_mean, save_invstd});
  if ((running_mean == nullptr) != (running_var == nullptr))
    throw std::invalid_argument("BatchNormPlan::forward_train: running mean and variance must both be given");
  if (!layout_.can_train())
    throw std::invalid_argument(
        "BatchNormPlan::forward_train: a training pass needs more than one value per "
        "channel, got " +
        dims_text(layout_.n, layout_.c, layout_.h, layout_.w));
  const float one = 1.0f, zero = 0.0f;  // y = 1 * BN(x) + 0 * y: overwritten, not read
  HEARSAY_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
      handle_.get(), kMode, &one, &zero, x_desc_.get(), x, x_desc_.get(), y, param_desc_.get(), gamma, beta,
      running_mean == nullptr ? 0.0 : momentum, running_mean, running_var, eps, save_mean, save_invstd));
}

void BatchNormPlan::forward_eval(const float* x, float* y, const float* gamma, const float* beta,
                                 const float* running_mean, const float* running_var, double eps) {
  require_pointers("forward_eval", {x, y, gamma, beta, running_mean, running_var});
  const float one = 1.0f, zero = 0.0f;
  HEARSAY_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(
      handle_.get(), kMode, &one, &zero, x_desc_.get(), x, x_desc_.get(), y, param_desc_.get(), gamma, beta,
      running_mean, running_var, eps));
}

void BatchNormPlan::backward(const float* x, const float* dy, float* dx, const float* gamma, float* dgamma,
                             float* dbeta, double eps, const float* save_mean, const float* save_invstd) {
  require_pointers("backward", {x, dy, dx, gamma, dgamma, dbeta, save_mean, save_invstd});
  if (dx == dy) throw std::invalid_argument("BatchNormPlan::backward: dx must not be dy");
  const float one = 1.0f, zero = 0.0f;  // dx, dgamma and dbeta overwritten
  HEARSAY_CUDNN_CHECK(cudnnBatchNormalizationBackward(
      handle_.get(), kMode, &one, &zero, &one, &zero, x_desc_.get(), x, x_desc_.get(), dy, x_desc_.get(), dx,
      param_desc_.get(), gamma, dgamma, dbeta, eps, save_mean, save_invstd));
}

BatchNormPlan& BatchNormPlanCache::plan(const BatchNormDescriptors& d) {
  const BatchNormPlanKey key = batchnorm_plan_key(d);
  auto it = plans_.find(key);
  if (it == plans_.end()) it = plans_.emplace(key, std::make_unique<BatchNormPlan>(handle_, d)).first;
  return *it->second;
}

}  // namespace hearsay::cuda
