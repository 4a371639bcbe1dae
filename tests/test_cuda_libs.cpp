// The cuBLAS and cuDNN error checks: what needs no device. Only built with the CUDA
// backend; the GPU tests of the library calls are in tests/cuda/test_layers_device.cpp.
#ifdef HEARSAY_WITH_CUDA

#include <dlfcn.h>

#include <catch2/catch.hpp>
#include <string>

#include "kernels/cuda/blas.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/dnn.hpp"
#include "test_support.hpp"

using namespace hearsay;

namespace {

cublasStatus_t pretend_cublas_invalid_value() { return CUBLAS_STATUS_INVALID_VALUE; }
cudnnStatus_t pretend_cudnn_bad_param() { return CUDNN_STATUS_BAD_PARAM; }

// cuBLAS's own text for a status, from the library loaded here, apart from hearsay's
// loader. Not linked: libcublas and libcublasLt would cost each of the hundreds of
// processes ctest starts from this binary about 0.5 s of CPU at start-up (see blas.cpp).
std::string cublas_own_status_string(cublasStatus_t status) {
  const std::string soname = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) lib = dlopen(HEARSAY_CUBLAS_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  INFO("cannot load " << soname << " or " << HEARSAY_CUBLAS_LIBRARY);
  REQUIRE(lib != nullptr);
  const auto get = reinterpret_cast<decltype(&::cublasGetStatusString)>(dlsym(lib, "cublasGetStatusString"));
  REQUIRE(get != nullptr);
  return get(status);  // the library stays loaded: the text is its own
}

// Runs `check` and returns the CudaError it throws (fails the test if it does not).
template <class F>
cuda::CudaError thrown_by(F&& check) {
  try {
    check();
  } catch (const cuda::CudaError& e) {
    return e;
  }
  FAIL("the check did not throw");
  return cuda::CudaError("", 0);
}

}  // namespace

TEST_CASE("HEARSAY_CUBLAS_CHECK names cuBLAS, the call, the line and the status", "[cuda][check]") {
  REQUIRE_NOTHROW(HEARSAY_CUBLAS_CHECK(CUBLAS_STATUS_SUCCESS));
  const int line = __LINE__ + 1;
  const auto e = thrown_by([] { HEARSAY_CUBLAS_CHECK(pretend_cublas_invalid_value()); });
  const std::string what = e.what();
  INFO(what);
  CHECK(e.code() == static_cast<int>(CUBLAS_STATUS_INVALID_VALUE));
  CHECK(what.find("cuBLAS error " + std::to_string(int{CUBLAS_STATUS_INVALID_VALUE})) != std::string::npos);
  CHECK(what.find("pretend_cublas_invalid_value()") != std::string::npos);
  CHECK(what.find("test_cuda_libs.cpp:" + std::to_string(line)) != std::string::npos);
  CHECK(what.find("CUBLAS_STATUS_INVALID_VALUE") != std::string::npos);
  CHECK(what.find(cublas_own_status_string(CUBLAS_STATUS_INVALID_VALUE)) != std::string::npos);
  CHECK(what.find("on device ") != std::string::npos);
}

TEST_CASE("HEARSAY_CUDNN_CHECK names cuDNN, the call, the line and the status", "[cuda][check]") {
  REQUIRE_NOTHROW(HEARSAY_CUDNN_CHECK(CUDNN_STATUS_SUCCESS));
  const int line = __LINE__ + 1;
  const auto e = thrown_by([] { HEARSAY_CUDNN_CHECK(pretend_cudnn_bad_param()); });
  const std::string what = e.what();
  INFO(what);
  CHECK(e.code() == static_cast<int>(CUDNN_STATUS_BAD_PARAM));
  CHECK(what.find("cuDNN error " + std::to_string(int{CUDNN_STATUS_BAD_PARAM})) != std::string::npos);
  CHECK(what.find("pretend_cudnn_bad_param()") != std::string::npos);
  CHECK(what.find("test_cuda_libs.cpp:" + std::to_string(line)) != std::string::npos);
  CHECK(what.find(cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM)) != std::string::npos);
  CHECK(what.find("on device ") != std::string::npos);
}

TEST_CASE("Without a device the cuBLAS and cuDNN handles fail with a CudaError", "[cuda][check]") {
  if (cuda::device_count_or_zero() > 0) HEARSAY_SKIP("this machine has a CUDA device: the GPU tests create the handles");
  const auto blas = thrown_by([] { cuda::BlasHandle h; });
  INFO(blas.what());
  CHECK(std::string(blas.what()).find("cuBLAS error") != std::string::npos);
  CHECK(std::string(blas.what()).find("cublasCreate") != std::string::npos);
  const auto dnn = thrown_by([] { cuda::DnnHandle h; });
  INFO(dnn.what());
  CHECK(std::string(dnn.what()).find("cuDNN error") != std::string::npos);
  CHECK(std::string(dnn.what()).find("cudnnCreate") != std::string::npos);
}

#endif  // HEARSAY_WITH_CUDA
