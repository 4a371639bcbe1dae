// The hearsay executable's pthread_sigmask: the one libzmq's I/O threads call when they
// start, to block every signal. A thread that blocks SIGSEGV and then faults is killed by
// the kernel at once, before the crash report's handler can say where (base/crash_report.hpp);
// so here, as in every thread of hearsay's own, the signals of a fault stay unblocked.
// Blocking them never helped anyone: a fault they would hold back is fatal either way.
//
// It lives in the executable only: the Python module must not change how its host
// process's threads take signals. The executable exports the definition because
// libzmq.so, linked to it, refers to the symbol; the dynamic linker then binds libzmq's
// calls (and hearsay's own) here, and this calls glibc's.
#include <dlfcn.h>
#include <signal.h>

#include <cerrno>

#include "base/crash_report.hpp"

extern "C" int pthread_sigmask(int how, const sigset_t* __restrict set, sigset_t* __restrict old) noexcept {
  using Real = int (*)(int, const sigset_t*, sigset_t*);
  static const auto real = reinterpret_cast<Real>(::dlsym(RTLD_NEXT, "pthread_sigmask"));
  if (real == nullptr) return ENOSYS;
  if (set == nullptr || how == SIG_UNBLOCK) return real(how, set, old);
  sigset_t kept = *set;
  hearsay::remove_fault_signals(kept);
  return real(how, &kept, old);
}
