// The GPU tests' main. Every test in this binary needs a CUDA device. Where this machine
// has none to test (no NVIDIA driver installed, or a driver that sees no device) it prints
// why and exits 77, which ctest (SKIP_RETURN_CODE 77) reports as skipped. Where a driver
// is there but the device cannot be used (a driver older than this runtime, a failed
// initialisation), that is a broken GPU setup, the one case these tests exist for: it
// prints the CUDA error and exits 1. Listing the tests (ctest's discovery at build time)
// needs no device.
//
//   hearsay_cuda_tests --cuda-status   one line: the devices, why the tests skip, or why they fail
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>
#include <string>
#include <string_view>

#include "kernels/cuda/device.hpp"
#include "model/device.hpp"

namespace {

constexpr int kSkipped = 77;

// Whether no device is there to test, given device_count_or_zero's reason for none.
bool nothing_to_test(const std::string& reason) {
  if (!hearsay::nvidia_driver_installed()) return true;  // a machine without a GPU
  return reason == "no CUDA device" || reason.find("cudaErrorNoDevice") != std::string::npos;
}

bool only_lists(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a.rfind("--list", 0) == 0 || a == "-l" || a == "-h" || a == "--help" || a == "-?") return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  std::string reason;
  const int devices = hearsay::cuda::device_count_or_zero(reason);
  const bool skip = devices == 0 && nothing_to_test(reason);
  if (argc == 2 && std::string_view(argv[1]) == "--cuda-status") {
    if (skip) {
      std::printf("CUDA tests skip: %s\n", reason.c_str());
    } else if (devices == 0) {
      std::printf("CUDA tests fail: a driver is installed but no device is usable: %s\n", reason.c_str());
    } else {
      for (int d = 0; d < devices; ++d)
        std::printf("CUDA tests run on %s\n", hearsay::cuda::describe_device(d).c_str());
    }
    return 0;
  }
  if (devices == 0 && !only_lists(argc, argv)) {
    if (skip) {
      std::printf("skipped: this test needs a CUDA device (%s)\n", reason.c_str());
      return kSkipped;
    }
    std::printf("failed: an NVIDIA driver is installed but no CUDA device is usable: %s\n", reason.c_str());
    return 1;
  }
  return Catch::Session().run(argc, argv);
}
