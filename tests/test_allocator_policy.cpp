// keep_large_allocations_paged_in(): large blocks come from the heap and keep their pages
// when freed, so a peer receiving one big parameter message after another does not
// fault in and zero 100 MB each time.
#include <catch2/catch.hpp>
#include <cstdlib>

#include "gossip/network/transport/allocator_policy.hpp"

#if defined(__GLIBC__)
#include <malloc.h>
#include <sys/resource.h>

namespace {
// Writes one byte per page through a volatile pointer: a memset right before free() may
// be optimised away, and then no page would be touched at all.
void touch_pages(char* block, std::size_t bytes, char value) {
  volatile char* p = block;
  for (std::size_t i = 0; i < bytes; i += 4096) p[i] = value;
}

long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}
}  // namespace
#endif

TEST_CASE("large blocks stay in paged-in heap memory once the allocator policy is set",
          "[transport][allocator]") {
#if defined(__GLIBC__)
  REQUIRE(hearsay::transport::keep_large_allocations_paged_in());
  // 64 MiB is above glibc's largest mmap threshold (32 MiB): without the policy it is a
  // fresh mapping every time, 16,384 pages faulted in and zeroed on first touch.
  constexpr std::size_t kBytes = std::size_t{64} << 20;
  const std::size_t mapped_before = mallinfo2().hblks;
  auto* first = static_cast<char*>(std::malloc(kBytes));
  REQUIRE(first != nullptr);
  CHECK(mallinfo2().hblks == mapped_before);
  touch_pages(first, kBytes, 1);
  std::free(first);

  auto* second = static_cast<char*>(std::malloc(kBytes));
  REQUIRE(second != nullptr);
  const long faults_before = minor_faults();
  touch_pages(second, kBytes, 2);
  const long faults = minor_faults() - faults_before;
  std::free(second);
  INFO("page faults while touching the second block: " << faults);
  REQUIRE(faults < 1024);
#else
  REQUIRE_FALSE(hearsay::transport::keep_large_allocations_paged_in());
#endif
}
