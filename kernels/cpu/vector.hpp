// Vector kernels on flat fp32 buffers: the averaging used by gossip and the small
// reductions used by metrics. All lengths are element counts; buffers may alias only
// where a comment says so.
#pragma once
#include <cstddef>

namespace hearsay::cpu {

// y = a*x + b*y  (y may alias x). The averaging kernel: a = b = 0.5 mixes two peers.
void axpby(std::size_t n, float a, const float* x, float b, float* y);
// y = sum_k w[k] * xs[k]  (y may alias one of xs): weighted mix of several buffers.
void weighted_sum(std::size_t n, std::size_t k, const float* const* xs, const float* w, float* y);
// y += x
void add(std::size_t n, const float* x, float* y);
// x *= a
void scale(std::size_t n, float a, float* x);
void fill(std::size_t n, float value, float* x);
// dst[j * ldd + i] = src[i * lds + j] for i < rows, j < cols (matrices must not overlap).
void transpose(int rows, int cols, const float* src, long lds, float* dst, long ldd);
// sum of x[i]*y[i], accumulated in double so long buffers do not lose precision.
double dot(std::size_t n, const float* x, const float* y);
// sum of (x[i]-y[i])^2 in double: the parameter distance between two peers.
double squared_distance(std::size_t n, const float* x, const float* y);
// x += alpha * (to - from) element by element, in double before the rounding to float
// (`from` may alias x), and returns sum of (to - from)^2: one pass for a pairwise
// exchange's mixing and the partner distance it reports.
double add_scaled_difference(std::size_t n, float* x, double alpha, const float* to, const float* from);
// true when every element is finite (no NaN or Inf). x need not be aligned (it may point
// into a received frame).
bool all_finite(std::size_t n, const float* x);

}  // namespace hearsay::cpu
