#include "kernels/cuda/optim.hpp"

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/launch.hpp"
#include "kernels/cuda/math/optim_math.hpp"

namespace hearsay::cuda {
namespace {

using detail::grid_for;
using detail::kThreads;
using detail::require_pointer;

// The options are the same for every element, so the branches in sgd_element do not
// diverge; the kernel stays memory-bound.
__global__ void sgd_kernel(std::size_t n, float* __restrict__ param, const float* __restrict__ grad,
                           float* __restrict__ buf, SgdConfig config) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  float unused = 0.0f;  // sgd_element's buffer slot when there is no momentum buffer
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    param[i] = sgd_element(param[i], grad[i], buf != nullptr ? buf + i : &unused, config);
}

__global__ void adamw_kernel(std::size_t n, float* __restrict__ param, const float* __restrict__ grad,
                             float* __restrict__ m, float* __restrict__ v, AdamwScalars scalars) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const AdamwState s = adamw_element(AdamwState{param[i], m[i], v[i]}, grad[i], scalars);
    param[i] = s.param;
    m[i] = s.m;
    v[i] = s.v;
  }
}

}  // namespace

void sgd_update(std::size_t n, float* param, const float* grad, float* momentum_buf, float lr, float momentum,
                float dampening, float weight_decay, bool nesterov, bool first_step, cudaStream_t stream) {
  constexpr const char* kName = "sgd_update";
  if (n == 0) return;
  require_pointer(kName, "param", param);
  require_pointer(kName, "grad", grad);
  if (momentum != 0.0f && momentum_buf == nullptr)
    detail::bad_argument(kName, "momentum needs a buffer (momentum_buf is null)");
  const SgdConfig config{lr, momentum, dampening, weight_decay, nesterov, first_step};
  sgd_kernel<<<grid_for(n), kThreads, 0, stream>>>(n, param, grad, momentum != 0.0f ? momentum_buf : nullptr,
                                                   config);
  HEARSAY_CUDA_CHECK(cudaGetLastError());
}

void adamw_update(std::size_t n, float* param, const float* grad, float* m, float* v, float lr, float beta1,
                  float beta2, float eps, float weight_decay, std::int64_t step, cudaStream_t stream) {
  constexpr const char* kName = "adamw_update";
  if (step < 1) detail::bad_value(kName, "step", step, ">= 1 (it is 1-based)");
  if (n == 0) return;
  require_pointer(kName, "param", param);
  require_pointer(kName, "grad", grad);
  require_pointer(kName, "m", m);
  require_pointer(kName, "v", v);
  adamw_kernel<<<grid_for(n), kThreads, 0, stream>>>(
      n, param, grad, m, v, adamw_scalars(lr, beta1, beta2, eps, weight_decay, step));
  HEARSAY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace hearsay::cuda
