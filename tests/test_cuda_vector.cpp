// The CUDA error checks and the argument checks of the CUDA launchers: what needs no
// device. Only built with the CUDA backend; the tests that need a GPU are in tests/cuda.
#ifdef HEARSAY_WITH_CUDA

#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "base/rng.hpp"
#include "kernels/cpu/vector.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/vector.hpp"

using namespace hearsay;

namespace {

cudaError_t pretend_invalid_value() { return cudaErrorInvalidValue; }

// A stand-in for another library's status type (cuBLAS, cuDNN) to show the generic check.
enum class FakeStatus { ok = 0, broken = 7 };
const char* fake_status_string(FakeStatus s) { return s == FakeStatus::ok ? "fine" : "it broke"; }

}  // namespace

TEST_CASE("HEARSAY_CUDA_CHECK names the call file line and status", "[cuda][check]") {
  REQUIRE_NOTHROW(HEARSAY_CUDA_CHECK(cudaSuccess));

  int line = 0;
  std::string what;
  int code = 0;
  try {
    line = __LINE__ + 1;
    HEARSAY_CUDA_CHECK(pretend_invalid_value());
    FAIL("HEARSAY_CUDA_CHECK did not throw");
  } catch (const cuda::CudaError& e) {
    const std::runtime_error& base = e;  // CudaError is a std::runtime_error
    what = base.what();
    code = e.code();
  }
  INFO(what);
  CHECK(code == static_cast<int>(cudaErrorInvalidValue));
  CHECK(what.find("pretend_invalid_value()") != std::string::npos);
  CHECK(what.find("test_cuda_vector.cpp:" + std::to_string(line)) != std::string::npos);
  CHECK(what.find("cudaErrorInvalidValue") != std::string::npos);
  CHECK(what.find(cudaGetErrorString(cudaErrorInvalidValue)) != std::string::npos);
  CHECK(what.find("on device ") != std::string::npos);
}

TEST_CASE("HEARSAY_CHECK_STATUS works for any status type and to-string function", "[cuda][check]") {
  REQUIRE_NOTHROW(HEARSAY_CHECK_STATUS("fakeLib", FakeStatus::ok, FakeStatus::ok, fake_status_string));
  try {
    HEARSAY_CHECK_STATUS("fakeLib", FakeStatus::broken, FakeStatus::ok, fake_status_string);
    FAIL("HEARSAY_CHECK_STATUS did not throw");
  } catch (const cuda::CudaError& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(e.code() == 7);
    CHECK(what.find("fakeLib error 7") != std::string::npos);
    CHECK(what.find("it broke") != std::string::npos);
    CHECK(what.find("FakeStatus::broken") != std::string::npos);
  }
}

TEST_CASE("cuda::axpby checks its arguments before touching the device", "[cuda][vector]") {
  // n == 0 launches nothing, so null pointers are fine and no device is needed.
  REQUIRE_NOTHROW(cuda::axpby(0, 1.0f, nullptr, 1.0f, nullptr, nullptr));
  float dummy = 0.0f;
  CHECK_THROWS_AS(cuda::axpby(1, 1.0f, nullptr, 1.0f, &dummy, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(cuda::axpby(1, 1.0f, &dummy, 1.0f, nullptr, nullptr), std::invalid_argument);
}

TEST_CASE("DeviceBuffer of zero elements and moves need no device", "[cuda][device]") {
  cuda::DeviceBuffer<float> empty(0);
  CHECK(empty.empty());
  CHECK(empty.data() == nullptr);
  cuda::DeviceBuffer<float> moved(std::move(empty));
  CHECK(moved.size() == 0);
  CHECK_THROWS_AS(moved.copy_from_host(std::vector<float>(1)), std::out_of_range);
}

#endif  // HEARSAY_WITH_CUDA
