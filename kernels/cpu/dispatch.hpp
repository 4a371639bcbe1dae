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
}  // namespace hearsay::cpu
