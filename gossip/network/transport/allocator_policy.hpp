// Process-wide allocator settings for peers that receive large messages.
//
// ZeroMQ allocates every received message with malloc. glibc serves blocks above its mmap
// threshold (at most 32 MiB) with a fresh mmap, and threads other than main from their
// own arenas, whose freed memory goes back to the kernel; either way each large message
// lands in pages the kernel must fault in and zero again. For a 100 MB parameter
// message that was a third of the transfer time. After keep_large_allocations_paged_in()
// such blocks come from the main heap and stay there when freed, so the next message
// reuses pages already mapped. The price: the heap keeps its peak size.
#pragma once

namespace hearsay::transport {

// Call once at process start, before threads exist (arena settings apply to threads
// created afterwards). Returns false when the C library does not take the settings
// (not glibc); nothing changes then.
bool keep_large_allocations_paged_in();

}  // namespace hearsay::transport
