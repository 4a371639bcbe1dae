// cuBLAS for the Linear layer: an RAII handle, the cuBLAS status check, and the three
// Linear products on row-major device buffers. The transposes and leading dimensions come
// from kernels/cuda/gemm_layout.hpp, whose arithmetic is tested on the host; what runs
// here is exactly that GemmCall.
//
// Precision: true fp32 (CUBLAS_DEFAULT_MATH, no TF32 tensor cores). The GPU tests compare
// with the CPU layers at 1e-4, and TF32's 10-bit mantissa would miss that by far.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>
#include <utility>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/gemm_layout.hpp"

namespace hearsay::cuda {

// "CUBLAS_STATUS_INVALID_VALUE: an invalid numeric value was used as an argument".
// Needs no device.
std::string cublas_status_text(cublasStatus_t status);

inline void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  check_status("cuBLAS", status, CUBLAS_STATUS_SUCCESS, cublas_status_text, call, file, line);
}

// Owns a cublasHandle_t created on the current device, on the default stream until
// set_stream, with host pointer mode (alpha and beta are host floats) and fp32 math.
// Non-copyable, movable; the destructor never throws. A handle is not thread-safe: one
// per thread or stream.
class BlasHandle {
 public:
  BlasHandle();
  ~BlasHandle() { destroy(); }
  BlasHandle(const BlasHandle&) = delete;
  BlasHandle& operator=(const BlasHandle&) = delete;
  BlasHandle(BlasHandle&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  BlasHandle& operator=(BlasHandle&& other) noexcept;

  // Later calls on this handle are queued on `stream` (nullptr: the default stream).
  void set_stream(cudaStream_t stream);
  cudaStream_t stream() const;
  cublasHandle_t get() const noexcept { return handle_; }

 private:
  void destroy() noexcept;
  cublasHandle_t handle_ = nullptr;
};

// Runs `call` (from row_major_gemm_call or the linear_*_call functions) on the row-major
// operands A and B of the product it was made for: C = alpha op(A) op(B) + beta C.
// Asynchronous on the handle's stream. Throws std::invalid_argument for a null pointer
// when the call has work to do.
void sgemm(BlasHandle& h, const GemmCall& call, float alpha, const float* a, const float* b, float beta,
           float* c);

// The Linear layer's products on dense row-major device buffers: x [batch x in],
// W [out x in], y and dy [batch x out]. All overwrite their output and are asynchronous on
// the handle's stream. Sizes must be positive and pointers non-null
// (std::invalid_argument otherwise, before anything is queued).
// y = x W^T (the bias is added separately).
void linear_forward(BlasHandle& h, int batch, int in, int out, const float* x, const float* w, float* y);
// dx = dy W.
void linear_backward_data(BlasHandle& h, int batch, int in, int out, const float* dy, const float* w,
                          float* dx);
// dW = dy^T x.
void linear_backward_weight(BlasHandle& h, int batch, int in, int out, const float* dy, const float* x,
                            float* dw);

}  // namespace hearsay::cuda

#define HEARSAY_CUBLAS_CHECK(call) ::hearsay::cuda::check_cublas((call), #call, __FILE__, __LINE__)
