// CPU feature dispatch for hand-vectorised loops.
//
// HEARSAY_CLONES asks GCC/Clang to compile a function three times (AVX-512, AVX2 + FMA,
// baseline x86-64) and pick one at load time through an ifunc, so one portable binary
// uses AVX-512 where the machine has it. Plain loops written for the vectoriser are
// enough for the memory-bound kernels; the compute-bound ones go through BLAS.
//
// The clones name ISA levels (x86-64-v4: AVX-512 F/BW/CD/DQ/VL; x86-64-v3: AVX2, FMA),
// which GCC's resolver tests as CPU features. A CPU model such as
// "arch=skylake-avx512" would be tested with __builtin_cpu_is, which is false on every
// other AVX-512 CPU (Cascade Lake, Ice Lake, Zen 4), so those ran the baseline clone.
// Clang 14 does not take ISA levels in target_clones; it gets the feature names.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(HEARSAY_NO_CLONES)
#define HEARSAY_HAVE_CLONES 1
#if defined(__clang__)
#define HEARSAY_CLONE_WIDE "avx512f"
#define HEARSAY_CLONE_MID "avx2"
#else
#define HEARSAY_CLONE_WIDE "arch=x86-64-v4"
#define HEARSAY_CLONE_MID "arch=x86-64-v3"
#endif
#define HEARSAY_CLONES __attribute__((target_clones(HEARSAY_CLONE_WIDE, HEARSAY_CLONE_MID, "default")))
#else
#define HEARSAY_HAVE_CLONES 0
#define HEARSAY_CLONES
#endif

namespace hearsay::cpu {
// Human-readable name of the widest vector ISA the running CPU offers, for logs and bench.
const char* simd_level();

// Which clone the load-time resolver picks on this CPU: "wide" (AVX-512), "mid" (AVX2)
// or "baseline", from functions versioned with the same targets as HEARSAY_CLONES.
const char* clone_level();

// Whether the running CPU has the AVX-512 subsets the hand-written kernels use (F, BW,
// VL: every AVX-512 server CPU since Skylake-SP). Checked once; the kernels' intrinsic
// paths run only when it is true.
bool has_avx512();

// Bits [begin, end) set, clamped to 0..16: the lane mask of a 16-lane vector (or, cast
// to 8 bits, an 8-lane one) whose lanes begin..end-1 hold data.
constexpr unsigned lane_mask(int begin, int end) {
  begin = begin < 0 ? 0 : begin;
  end = end > 16 ? 16 : end;
  return end > begin ? ((1u << end) - 1u) & ~((1u << begin) - 1u) : 0u;
}
}  // namespace hearsay::cpu
