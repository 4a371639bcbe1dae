// Names the calling thread, so that `top -H`, perf and debuggers tell a peer's threads
// apart (Linux keeps at most 15 bytes of a name; longer ones are cut).
#pragma once
#include <pthread.h>

#include <cstring>

namespace hearsay {

inline void name_this_thread(const char* name) noexcept {
  char cut[16] = {};
  std::strncpy(cut, name, sizeof cut - 1);
  (void)pthread_setname_np(pthread_self(), cut);
}

}  // namespace hearsay
