// What the launchers in this directory share: grid sizing and argument checks. Plain C++
// (no kernels), used by the .cu files only; not part of the public API.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace hearsay::cuda::detail {

// Threads per block of the element-wise kernels.
constexpr unsigned kThreads = 256;

// Blocks for `work` independent items at `threads` per block: one item per thread up to a
// few resident waves of the current device (grid-stride loops cover the rest); at least 1.
unsigned grid_for(std::size_t work, unsigned threads = kThreads);

// Throws std::invalid_argument("hearsay::cuda::<launcher>: <message>").
[[noreturn]] void bad_argument(const char* launcher, const std::string& message);

inline void require_pointer(const char* launcher, const char* name, const void* p) {
  if (p == nullptr) bad_argument(launcher, std::string(name) + " is null with a non-empty shape");
}

// Device pointers are dereferenced as their element type (or wider), so they must be
// aligned to it; an odd address would fault on the device ("misaligned address").
inline void require_aligned(const char* launcher, const char* name, const void* p, std::size_t alignment) {
  if (reinterpret_cast<std::uintptr_t>(p) % alignment != 0)
    bad_argument(launcher, std::string(name) + " is not " + std::to_string(alignment) + "-byte aligned");
}

// "name = value must be <rule>".
template <class T>
[[noreturn]] void bad_value(const char* launcher, const char* name, T value, const char* rule) {
  bad_argument(launcher, std::string(name) + " = " + std::to_string(value) + " must be " + rule);
}

// A zeroed unsigned int in stream-ordered device memory, for kernels that raise a flag
// (the all_finite checks). read() waits for the stream and returns the flag's value.
class StreamFlag {
 public:
  explicit StreamFlag(cudaStream_t stream);
  ~StreamFlag();
  StreamFlag(const StreamFlag&) = delete;
  StreamFlag& operator=(const StreamFlag&) = delete;

  unsigned* get() const noexcept { return flag_; }
  unsigned read();

 private:
  cudaStream_t stream_;
  unsigned* flag_ = nullptr;
};

}  // namespace hearsay::cuda::detail
