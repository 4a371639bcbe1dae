#include "kernels/cuda/check.hpp"

namespace hearsay::cuda {

std::string cuda_status_text(cudaError_t status) {
  std::string text = cudaGetErrorName(status);
  text += ": ";
  text += cudaGetErrorString(status);
  return text;
}

namespace detail {

[[noreturn]] void throw_status(std::string_view library, int code, std::string_view status_text,
                               const char* call, const char* file, int line) {
  std::string msg;
  msg.reserve(256);
  msg.append(library).append(" error ").append(std::to_string(code)).append(" (");
  msg.append(status_text).append(") in `").append(call ? call : "?").append("` at ");
  msg.append(file ? file : "?").append(":").append(std::to_string(line)).append(" on device ");
  // The device is context for the reader; asking for it must not replace the error
  // being reported, so a failure here only prints "?".
  int device = -1;
  if (cudaGetDevice(&device) == cudaSuccess) {
    msg.append(std::to_string(device));
  } else {
    msg.append("?");
    (void)cudaGetLastError();  // do not leave this query's failure for the next launch check
  }
  throw CudaError(msg, code);
}

}  // namespace detail
}  // namespace hearsay::cuda
