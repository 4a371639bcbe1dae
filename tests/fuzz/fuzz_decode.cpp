// libFuzzer entry point: the whole receive-side pipeline over arbitrary bytes. Built
// with -fsanitize=fuzzer,address,undefined when HEARSAY_FUZZ=ON with clang; run it with
// scripts/fuzz.
#include <cstddef>
#include <cstdint>

#include "receive_pipeline.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  hearsay::wire::fuzz::run_receive_pipeline({data, size});
  return 0;
}
