// The x86 intrinsics for the hand-written AVX-512 kernels, included in one place.
//
// HEARSAY_HAVE_AVX512_PATH is 1 where the compiler can build those kernels (x86-64 with
// GCC or Clang); whether they run is decided at run time by cpu::has_avx512().
// HEARSAY_NO_CLONES (which also turns off dispatch.hpp's target_clones) builds the
// portable code only.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(HEARSAY_NO_CLONES)
#define HEARSAY_HAVE_AVX512_PATH 1
// GCC 12.2's AVX-512 headers start some intrinsics (permutes, extracts) from a
// deliberately undefined vector and then warn about it at -O3 (GCC bug 105593, fixed in
// 12.3 and 13).
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#else
#define HEARSAY_HAVE_AVX512_PATH 0
#endif
