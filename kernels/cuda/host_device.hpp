// What lets one function body run in a CUDA kernel and in a host test: HEARSAY_HD marks
// functions for both sides, and the helpers below do arithmetic that both sides round
// the same way. Plain C++ without CUDA headers, so g++ compiles the math headers that
// include it (the CPU tests sweep those functions over every index).
#pragma once
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define HEARSAY_HD __host__ __device__
#else
#define HEARSAY_HD
#endif

namespace hearsay::cuda {

// Single IEEE operations that are never fused. nvcc contracts a*b + c into one FMA by
// default while kernels/cpu is compiled with -ffp-contract=off, so a plain expression
// could round differently on the device; __fmul_rn and friends are never contracted,
// which keeps device results bit-identical to kernels/cpu where the order is the same.
// On the host they are the plain operators (the host build of the tests never fuses:
// it targets baseline x86-64, which has no FMA).
HEARSAY_HD inline float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
HEARSAY_HD inline float add_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
HEARSAY_HD inline float sub_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

// Bit casts that work in device code (std::bit_cast is a host constexpr function there).
HEARSAY_HD inline std::uint32_t bits_of(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}
HEARSAY_HD inline float float_of(std::uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// Whether the exponent bits of an fp32 value are all ones (inf or NaN), as cpu::all_finite tests.
HEARSAY_HD inline bool f32_bits_special(std::uint32_t bits) { return (bits & 0x7F800000u) == 0x7F800000u; }

// One level of the fixed-order tree reduction that the block reductions use: element i
// takes in element i + half. The kernels run the levels half = n/2, n/4, ..., 1 with a
// barrier between them (i = the thread); tests run the same levels in a loop, so both
// add the same pairs in the same order.
template <class T>
HEARSAY_HD inline void tree_step(T* v, unsigned i, unsigned half) {
  v[i] = v[i] + v[i + half];
}

// The tree reduction of v[0..n) (n a power of two) as the kernels perform it, level by
// level; the result is v[0]. For host tests and for single-thread device code.
template <class T>
HEARSAY_HD inline T tree_reduce(T* v, unsigned n) {
  for (unsigned half = n / 2; half > 0; half /= 2)
    for (unsigned i = 0; i < half; ++i) tree_step(v, i, half);
  return v[0];
}

}  // namespace hearsay::cuda
