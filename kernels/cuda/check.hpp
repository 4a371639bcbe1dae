// Error checks for the CUDA libraries: one family for the runtime, cuBLAS and cuDNN. A
// failing status becomes a hearsay::cuda::CudaError (never an abort) whose message names
// the library, the status, the call text, the file and line, and the current device.
//
//   HEARSAY_CUDA_CHECK(cudaMalloc(&p, bytes));
//   HEARSAY_CUBLAS_CHECK(cublasSgemm(...));       // kernels/cuda/blas.hpp
//   HEARSAY_CUDNN_CHECK(cudnnConvolutionForward(...));  // kernels/cuda/dnn.hpp
// The library checks live beside their libraries so that this header needs only cudart.
#pragma once
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>
#include <string_view>

namespace hearsay::cuda {

class CudaError : public std::runtime_error {
 public:
  CudaError(const std::string& what, int code) : std::runtime_error(what), code_(code) {}
  // The library's raw status value (a cudaError_t, cublasStatus_t, ... as int).
  int code() const noexcept { return code_; }

 private:
  int code_;
};

namespace detail {
// Builds the message and throws. Out of line so the check itself stays a compare+branch.
[[noreturn]] void throw_status(std::string_view library, int code, std::string_view status_text,
                               const char* call, const char* file, int line);
}  // namespace detail

// Generic check: `status` failed unless it equals `success`; `to_string(status)` gives
// something convertible to std::string_view (e.g. cudaGetErrorString, cublasGetStatusString).
template <class Status, class ToString>
inline void check_status(std::string_view library, Status status, Status success, ToString&& to_string,
                         const char* call, const char* file, int line) {
  if (status != success) [[unlikely]] {
    detail::throw_status(library, static_cast<int>(status), std::string_view(to_string(status)), call, file,
                         line);
  }
}

// "cudaErrorInvalidValue: invalid argument". Works without a device or driver.
std::string cuda_status_text(cudaError_t status);

inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  check_status("CUDA", status, cudaSuccess, cuda_status_text, call, file, line);
}

}  // namespace hearsay::cuda

#define HEARSAY_CHECK_STATUS(library, call, success, to_string) \
  ::hearsay::cuda::check_status((library), (call), (success), (to_string), #call, __FILE__, __LINE__)

#define HEARSAY_CUDA_CHECK(call) ::hearsay::cuda::check_cuda((call), #call, __FILE__, __LINE__)
