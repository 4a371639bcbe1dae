#include "kernels/cpu/dispatch.hpp"

namespace hearsay::cpu {

const char* simd_level() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return "avx512";
  if (__builtin_cpu_supports("avx2")) return "avx2";
  return "sse2";
#else
  return "generic";
#endif
}

#if HEARSAY_HAVE_CLONES
// Versions of one function, resolved like HEARSAY_CLONES. External linkage: Clang reports
// the versions of an internal one as unused.
__attribute__((target(HEARSAY_CLONE_WIDE))) const char* resolved_clone() { return "wide"; }
__attribute__((target(HEARSAY_CLONE_MID))) const char* resolved_clone() { return "mid"; }
__attribute__((target("default"))) const char* resolved_clone() { return "baseline"; }
const char* clone_level() { return resolved_clone(); }
#else
const char* clone_level() { return "baseline"; }
#endif

bool has_avx512() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
  }();
  return yes;
#else
  return false;
#endif
}

}  // namespace hearsay::cpu
