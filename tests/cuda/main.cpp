// The GPU tests' main. Every test in this binary needs a CUDA device; without one it
// prints the reason and exits 77, which ctest (SKIP_RETURN_CODE 77) reports as skipped.
// Listing the tests (ctest's discovery at build time) needs no device.
//
//   hearsay_cuda_tests --cuda-status   one line: the devices, or why the tests skip
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>
#include <string>
#include <string_view>

#include "kernels/cuda/device.hpp"

namespace {

constexpr int kSkipped = 77;

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
  if (argc == 2 && std::string_view(argv[1]) == "--cuda-status") {
    if (devices == 0) {
      std::printf("CUDA tests skip: %s\n", reason.c_str());
    } else {
      for (int d = 0; d < devices; ++d)
        std::printf("CUDA tests run on %s\n", hearsay::cuda::describe_device(d).c_str());
    }
    return 0;
  }
  if (devices == 0 && !only_lists(argc, argv)) {
    std::printf("skipped: this test needs a CUDA device (%s)\n", reason.c_str());
    return kSkipped;
  }
  return Catch::Session().run(argc, argv);
}
