// Payload dtype conversions for compressed gossip (wire dtypes f16, bf16, int8).
//
// Every pointer may be unaligned: payloads are read straight out of received network
// frames, so the kernels only ever use unaligned loads and stores. Lengths are element
// counts; inputs and outputs must not overlap.
//
// The entry points pick an AVX-512 implementation at run time when the CPU has
// AVX-512 F/BW/VL, and otherwise a portable one; both give bit-identical results, so
// peers on different machines encode and decode a payload to the same bits.
#pragma once
#include <cstddef>
#include <cstdint>

namespace hearsay::cpu {

// IEEE binary16, round to nearest even. Values of magnitude >= 65520 become +-inf, f32
// subnormals become +-0, NaN stays NaN (made quiet, keeping the top payload bits).
void f32_to_f16(std::size_t n, const float* x, std::uint16_t* y);
// Exact (every binary16 value is an f32 value); NaN stays NaN (made quiet).
void f16_to_f32(std::size_t n, const std::uint16_t* x, float* y);
// bfloat16 (the top half of an f32), round to nearest even; values that round past the
// largest bf16 become +-inf, NaN stays NaN (made quiet).
void f32_to_bf16(std::size_t n, const float* x, std::uint16_t* y);
// Exact.
void bf16_to_f32(std::size_t n, const std::uint16_t* x, float* y);

// Symmetric int8 with one f32 scale per chunk of `chunk` elements (the last chunk may be
// short): scale = max|x| / 127 over the chunk (0 for an all-zero chunk), q =
// round-to-nearest-even(x / scale) clamped to [-127, 127]. scales has ceil(n/chunk)
// entries. A chunk holding NaN or +-inf gets a NaN or inf scale (and q = 0 where x/scale
// is NaN), so non-finite parameters stay detectable after the round trip.
// Throws std::invalid_argument when chunk is 0.
void f32_to_int8(std::size_t n, std::size_t chunk, const float* x, std::int8_t* q, float* scales);
// y = q * scale of the element's chunk. Throws std::invalid_argument when chunk is 0.
void int8_to_f32(std::size_t n, std::size_t chunk, const std::int8_t* q, const float* scales, float* y);

// Whether every encoded value is finite (exponent bits not all ones); receivers check this
// before decoding into parameters.
bool f16_all_finite(std::size_t n, const std::uint16_t* x);
bool bf16_all_finite(std::size_t n, const std::uint16_t* x);

// Which implementation the entry points above use on this CPU: "avx512" or "portable".
const char* convert_implementation();

// The portable implementations, callable directly so that tests and benchmarks can
// compare them with the dispatched ones. Same contracts as above.
namespace portable {
void f32_to_f16(std::size_t n, const float* x, std::uint16_t* y);
void f16_to_f32(std::size_t n, const std::uint16_t* x, float* y);
void f32_to_bf16(std::size_t n, const float* x, std::uint16_t* y);
void bf16_to_f32(std::size_t n, const std::uint16_t* x, float* y);
void f32_to_int8(std::size_t n, std::size_t chunk, const float* x, std::int8_t* q, float* scales);
void int8_to_f32(std::size_t n, std::size_t chunk, const std::int8_t* q, const float* scales, float* y);
bool f16_all_finite(std::size_t n, const std::uint16_t* x);
bool bf16_all_finite(std::size_t n, const std::uint16_t* x);
}  // namespace portable

}  // namespace hearsay::cpu
