#include "kernels/cuda/blas.hpp"

#include <stdexcept>

namespace hearsay::cuda {

std::string cublas_status_text(cublasStatus_t status) {
  std::string text = cublasGetStatusName(status);
  text += ": ";
  text += cublasGetStatusString(status);
  return text;
}

BlasHandle::BlasHandle() {
  HEARSAY_CUBLAS_CHECK(cublasCreate(&handle_));
  try {
    HEARSAY_CUBLAS_CHECK(cublasSetPointerMode(handle_, CUBLAS_POINTER_MODE_HOST));
    // Plain fp32 FMA arithmetic, set explicitly rather than trusted as the default: no
    // TF32 tensor-core math (see the header).
    HEARSAY_CUBLAS_CHECK(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH));
  } catch (...) {
    destroy();
    throw;
  }
}

BlasHandle& BlasHandle::operator=(BlasHandle&& other) noexcept {
  if (this != &other) {
    destroy();
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

void BlasHandle::destroy() noexcept {
  // A failing destroy (after a sticky device error) leaves nothing a destructor can do.
  if (handle_ != nullptr) (void)cublasDestroy(handle_);
  handle_ = nullptr;
}

void BlasHandle::set_stream(cudaStream_t stream) { HEARSAY_CUBLAS_CHECK(cublasSetStream(handle_, stream)); }

cudaStream_t BlasHandle::stream() const {
  cudaStream_t stream = nullptr;
  HEARSAY_CUBLAS_CHECK(cublasGetStream(handle_, &stream));
  return stream;
}

void sgemm(BlasHandle& h, const GemmCall& call, float alpha, const float* a, const float* b, float beta,
           float* c) {
  validate(call);
  if (call.m == 0 || call.n == 0) return;
  if (c == nullptr || (call.k > 0 && (a == nullptr || b == nullptr)))
    throw std::invalid_argument("cuda::sgemm: null device pointer");
  const auto [first, second] = cublas_operands(call, a, b);
  HEARSAY_CUBLAS_CHECK(cublasSgemm(h.get(), call.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                   call.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, call.m, call.n, call.k, &alpha,
                                   first, call.lda, second, call.ldb, &beta, c, call.ldc));
}

namespace {
void require_pointers(const char* what, const void* p, const void* q, const void* r) {
  if (p == nullptr || q == nullptr || r == nullptr)
    throw std::invalid_argument(std::string(what) + ": null device pointer");
}
}  // namespace

void linear_forward(BlasHandle& h, int batch, int in, int out, const float* x, const float* w, float* y) {
  const GemmCall call = linear_forward_call(batch, in, out);
  require_pointers("cuda::linear_forward", x, w, y);
  sgemm(h, call, 1.0f, x, w, 0.0f, y);
}

void linear_backward_data(BlasHandle& h, int batch, int in, int out, const float* dy, const float* w,
                          float* dx) {
  const GemmCall call = linear_backward_data_call(batch, in, out);
  require_pointers("cuda::linear_backward_data", dy, w, dx);
  sgemm(h, call, 1.0f, dy, w, 0.0f, dx);
}

void linear_backward_weight(BlasHandle& h, int batch, int in, int out, const float* dy, const float* x,
                            float* dw) {
  const GemmCall call = linear_backward_weight_call(batch, in, out);
  require_pointers("cuda::linear_backward_weight", dy, x, dw);
  sgemm(h, call, 1.0f, dy, x, 0.0f, dw);
}

}  // namespace hearsay::cuda
