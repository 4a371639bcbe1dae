// Names the calling thread, so that `top -H`, perf and debuggers tell a peer's threads
// apart (Linux keeps at most 15 bytes of a name; longer ones are cut). Every thread of
// hearsay calls it first: it also readies the thread for the crash report (its own
// alternate signal stack, the fault signals unblocked), which then names the thread.
#pragma once
#include <pthread.h>

#include <algorithm>
#include <cstring>

#include "base/crash_report.hpp"

namespace hearsay {

inline void name_this_thread(const char* name) noexcept {
  char cut[16] = {};
  std::memcpy(cut, name, std::min(std::strlen(name), sizeof cut - 1));
  (void)pthread_setname_np(pthread_self(), cut);
  prepare_thread_for_crash_report();
}

}  // namespace hearsay
