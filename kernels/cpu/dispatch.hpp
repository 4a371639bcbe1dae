// CPU feature dispatch for hand-vectorised loops.
//
// HEARSAY_CLONES asks GCC/Clang to compile a function three times (AVX-512, AVX2,
// baseline x86-64) and pick one at load time through an ifunc, so one portable binary
// uses AVX-512 where the machine has it. Plain loops written for the vectoriser are
// enough for the memory-bound kernels; the compute-bound ones go through BLAS.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(HEARSAY_NO_CLONES)
#define HEARSAY_CLONES __attribute__((target_clones("arch=skylake-avx512", "arch=haswell", "default")))
#else
#define HEARSAY_CLONES
#endif

namespace hearsay::cpu {
// Human-readable name of the widest vector ISA the running CPU offers, for logs and bench.
const char* simd_level();

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
