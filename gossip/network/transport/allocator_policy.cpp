#include "gossip/network/transport/allocator_policy.hpp"

// Any C library header defines __GLIBC__ (through <features.h>); without one before the
// test below, the policy compiled to "return false" everywhere.
#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace hearsay::transport {

bool keep_large_allocations_paged_in() {
#if defined(__GLIBC__)
  // No mmap for large blocks, no trimming of the heap top, and one arena for all
  // threads (ZeroMQ's I/O thread allocates the messages the caller later frees).
  const bool ok =
      mallopt(M_MMAP_MAX, 0) == 1 && mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1 && mallopt(M_ARENA_MAX, 1) == 1;
  return ok;
#else
  return false;
#endif
}

}  // namespace hearsay::transport
