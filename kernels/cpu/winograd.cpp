#include "kernels/cpu/winograd.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cpu/dispatch.hpp"

namespace hearsay::cpu {

namespace {

constexpr int kLanes = 16;  // tiles (or filters) transformed side by side, one per vector lane

// The transforms of F(m x m, r x r), alpha = m + r - 1.
template <int M, int R>
struct Transforms {
  static constexpr int kM = M, kR = R, kA = M + R - 1;
  float at[M][kA];   // A^T
  float g[kA][R];    // G
  float bt[kA][kA];  // B^T
};

// Toom-Cook construction for F(m, r) at finite points p_0..p_{n-1} plus infinity.
// Linear convolution evaluates both factors at the points (matrices E), multiplies, and
// interpolates with L, whose column j holds the coefficients of prod_{l != j} (x - p_l)
// (the last column: prod_l (x - p_l)). Correlation is the transpose of that algorithm:
// y = E_m^T [(E_r g) . (L^T d)], so A^T = E_m^T, G = E_r and B^T = L^T, with the
// Lagrange denominators moved into G.
template <int M, int R>
constexpr Transforms<M, R> make_transforms(const std::array<double, M + R - 2>& p) {
  constexpr int kA = M + R - 1, n = kA - 1;
  Transforms<M, R> t{};
  auto product_without = [&](int skip, double(&coef)[kA]) {
    for (double& c : coef) c = 0.0;
    coef[0] = 1.0;
    int degree = 0;
    for (int l = 0; l < n; ++l) {
      if (l == skip) continue;
      for (int d = degree + 1; d > 0; --d) coef[d] = coef[d - 1] - p[l] * coef[d];
      coef[0] = -p[l] * coef[0];
      ++degree;
    }
  };
  for (int j = 0; j < n; ++j) {
    double power = 1.0;
    double denominator = 1.0;
    for (int l = 0; l < n; ++l)
      if (l != j) denominator *= p[j] - p[l];
    for (int k = 0; k < std::max(M, R); ++k) {
      if (k < M) t.at[k][j] = static_cast<float>(power);
      if (k < R) t.g[j][k] = static_cast<float>(power / denominator);
      power *= p[j];
    }
    double coef[kA];
    product_without(j, coef);
    for (int q = 0; q < kA; ++q) t.bt[j][q] = static_cast<float>(coef[q]);
  }
  t.at[M - 1][n] = 1.0f;
  t.g[n][R - 1] = 1.0f;
  double coef[kA];
  product_without(-1, coef);
  for (int q = 0; q < kA; ++q) t.bt[n][q] = static_cast<float>(coef[q]);
  return t;
}

constexpr Transforms<3, 5> kF35 = make_transforms<3, 5>({0.0, 1.0, -1.0, 2.0, -2.0, -0.5});
constexpr Transforms<4, 3> kF43 = make_transforms<4, 3>({0.0, 1.0, -1.0, 0.5, -0.5});
constexpr Transforms<2, 3> kF23 = make_transforms<2, 3>({0.0, 1.0, -1.0});

// One value per lane. GCC's vector extension lets every clone (dispatch.hpp) lower it
// to its own registers: one zmm on AVX-512, two ymm on AVX2, four xmm otherwise.
typedef float Lanes __attribute__((vector_size(kLanes * sizeof(float))));

__attribute__((always_inline)) inline void load_lanes(const float* p, int lanes, Lanes& v) {
  if (lanes == kLanes) {
    std::memcpy(&v, p, sizeof v);
  } else {
    v = Lanes{};
    for (int l = 0; l < lanes; ++l) v[l] = p[l];
  }
}

__attribute__((always_inline)) inline void store_lanes(const Lanes& v, int lanes, float* p) {
  if (lanes == kLanes) {
    std::memcpy(p, &v, sizeof v);
  } else {
    for (int l = 0; l < lanes; ++l) p[l] = v[l];
  }
}

// The alpha^2 positions of `lanes` consecutive tiles (or filters) of a transformed
// tensor [xi][rows][ld]: p points at the first one's row, position_stride = rows * ld.
template <int N>
__attribute__((always_inline)) inline void load_positions(const float* p, long position_stride, int lanes,
                                                          Lanes (&v)[N]) {
  for (int xi = 0; xi < N; ++xi) load_lanes(p + xi * position_stride, lanes, v[xi]);
}

template <int N>
__attribute__((always_inline)) inline void store_positions(const Lanes (&v)[N], int lanes, float* p,
                                                           long position_stride) {
  for (int xi = 0; xi < N; ++xi) store_lanes(v[xi], lanes, p + xi * position_stride);
}

// acc = c * v, or acc += c * v once `started`. Fully unrolled over a constant matrix, the
// coefficient is a constant: zeros drop out and +-1 need no multiplication.
__attribute__((always_inline)) inline void multiply_add(float c, const Lanes& v, bool& started, Lanes& acc) {
  if (c == 0.0f) return;
  if (started) {
    acc += c * v;
  } else {
    acc = c * v;
    started = true;
  }
}

// Lane matrices are [rows][cols] of Lanes. m(i, y) is M[i][y], or M[y][i] when Trans.
// out[i][x] = sum_y m(i, y) in[y][x]
template <int R, int S, int X, bool Trans, int MR, int MC>
__attribute__((always_inline)) inline void left(const float (&m)[MR][MC], const Lanes* in, Lanes* out) {
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
    for (int x = 0; x < X; ++x) {
      Lanes acc{};
      bool started = false;
#pragma GCC unroll 8
      for (int y = 0; y < S; ++y) multiply_add(Trans ? m[y][i] : m[i][y], in[y * X + x], started, acc);
      out[i * X + x] = acc;
    }
}

// out[y][j] = sum_x in[y][x] m(j, x)
template <int Y, int X, int R, bool Trans, int MR, int MC>
__attribute__((always_inline)) inline void right(const Lanes* in, const float (&m)[MR][MC], Lanes* out) {
#pragma GCC unroll 8
  for (int y = 0; y < Y; ++y)
#pragma GCC unroll 8
    for (int j = 0; j < R; ++j) {
      Lanes acc{};
      bool started = false;
#pragma GCC unroll 8
      for (int x = 0; x < X; ++x) multiply_add(Trans ? m[x][j] : m[j][x], in[y * X + x], started, acc);
      out[y * R + j] = acc;
    }
}

// A tile's window on a plane, for one lane: the offset of its top-left corner from the
// batch's start (outside the image where it overhangs the padding) and the rows and
// columns [y0, y1) x [x0, x1) of it that lie inside the image.
struct Window {
  long corner;
  int y0, y1, x0, x1;
};

// The input window (alpha x alpha) of tile t.
inline Window input_window(const WinogradTiling& w, long t) {
  const ConvGeometry& g = w.g;
  const long image = t / w.tiles_per_image(), within = t - image * w.tiles_per_image();
  const int iy = static_cast<int>(within / w.tiles_w) * w.m - g.padding;
  const int ix = static_cast<int>(within % w.tiles_w) * w.m - g.padding;
  return {image * g.channels * g.height * g.width + static_cast<long>(iy) * g.width + ix, std::max(0, -iy),
          std::min(w.alpha, g.height - iy), std::max(0, -ix), std::min(w.alpha, g.width - ix)};
}

// The output block (m x m) of tile t, on planes of K = out_channels.
inline Window output_window(const WinogradTiling& w, int out_channels, long t) {
  const int oh = w.g.out_h(), ow = w.g.out_w();
  const long image = t / w.tiles_per_image(), within = t - image * w.tiles_per_image();
  const int oy = static_cast<int>(within / w.tiles_w) * w.m, ox = static_cast<int>(within % w.tiles_w) * w.m;
  return {image * out_channels * oh * ow + static_cast<long>(oy) * ow + ox, 0, std::min(w.m, oh - oy), 0,
          std::min(w.m, ow - ox)};
}

constexpr int round16(int n) { return (n + kLanes - 1) / kLanes * kLanes; }

// dst[j][i] = src[i][j] for a 16x16 block, in registers by four perfect shuffles: each
// interleaves row i with row i + 8 into rows 2i and 2i + 1, which rotates the 8 bits of
// (row, column) left by one; after four rotations they have traded places.
__attribute__((always_inline)) inline void transpose16(const float* src, long lds, float* dst, long ldd) {
  typedef int Index __attribute__((vector_size(kLanes * sizeof(int))));
  constexpr Index lo = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23};
  constexpr Index hi = {8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  Lanes r[kLanes], t[kLanes];
  for (int i = 0; i < kLanes; ++i) std::memcpy(&r[i], src + i * lds, sizeof(Lanes));
  for (int stage = 0; stage < 4; ++stage) {
    for (int i = 0; i < kLanes / 2; ++i) {
      t[2 * i] = __builtin_shuffle(r[i], r[i + 8], lo);
      t[2 * i + 1] = __builtin_shuffle(r[i], r[i + 8], hi);
    }
    for (int i = 0; i < kLanes; ++i) r[i] = t[i];
  }
  for (int j = 0; j < kLanes; ++j) std::memcpy(dst + j * ldd, &r[j], sizeof(Lanes));
}

// Each lane's values as a row (rows[l][j]) and the same values as lane vectors (v[j][l]),
// both P wide (a multiple of 16): per-lane copies move whole rows, and the transforms
// whole vectors, with the transposition between them done 16 x 16 in registers.
template <int P>
__attribute__((always_inline)) inline void rows_to_lanes(const float (&rows)[kLanes][P], Lanes (&v)[P]) {
  for (int j = 0; j < P; j += kLanes) transpose16(&rows[0][j], P, reinterpret_cast<float*>(&v[j]), kLanes);
}

template <int P>
__attribute__((always_inline)) inline void lanes_to_rows(const Lanes (&v)[P], float (&rows)[kLanes][P]) {
  for (int j = 0; j < P; j += kLanes)
    transpose16(reinterpret_cast<const float*>(&v[j]), kLanes, &rows[0][j], P);
}

template <class T>
__attribute__((always_inline)) inline void filter_transform(const T& t, long filters, const float* w,
                                                            float* u) {
  constexpr int A = T::kA, R = T::kR;
  Lanes in[R * R], mid[A * R], out[A * A];
  for (long f0 = 0; f0 < filters; f0 += kLanes) {
    const int lanes = static_cast<int>(std::min<long>(kLanes, filters - f0));
    for (int e = 0; e < R * R; ++e) {
      in[e] = Lanes{};
      for (int l = 0; l < lanes; ++l) in[e][l] = w[(f0 + l) * R * R + e];
    }
    left<A, R, R, false>(t.g, in, mid);
    right<A, R, A, false>(mid, t.g, out);
    store_positions(out, lanes, u + f0, filters);  // [xi][k][c]
  }
}

template <class T>
__attribute__((always_inline)) inline void filter_grad(const T& t, int out_channels, int in_channels,
                                                       const float* du, float* dw) {
  constexpr int A = T::kA, R = T::kR;
  const long filters = static_cast<long>(out_channels) * in_channels;
  Lanes in[A * A], mid[R * A], out[R * R];
  for (long f0 = 0; f0 < filters; f0 += kLanes) {
    const int lanes = static_cast<int>(std::min<long>(kLanes, filters - f0));
    load_positions(du + f0, filters, lanes, in);
    left<R, A, A, true>(t.g, in, mid);
    right<R, A, R, true>(mid, t.g, out);
    for (int l = 0; l < lanes; ++l) {
      // Lane l holds du's filter f0 + l, in its (c, k) order; dw is [k][c].
      const long f = f0 + l, filter = (f % out_channels) * in_channels + f / out_channels;
      for (int e = 0; e < R * R; ++e) dw[filter * R * R + e] = out[e][l];
    }
  }
}

// row[y][x] = plane[corner + y * width + x] (an S x S row-major block) over the window's
// inside; the rest of row is left as it is (zero).
template <int S>
__attribute__((always_inline)) inline void copy_in(const float* plane, const Window& v, int width,
                                                   float* row) {
  for (int y = v.y0; y < v.y1; ++y) {
    const float* src = plane + v.corner + static_cast<long>(y) * width;
    if (v.x0 == 0 && v.x1 == S) {
      for (int x = 0; x < S; ++x) row[y * S + x] = src[x];
    } else {
      for (int x = v.x0; x < v.x1; ++x) row[y * S + x] = src[x];
    }
  }
}

// plane[corner + y * width + x] = row[y][x] (or += when Add) over the window's inside.
template <int S, bool Add>
__attribute__((always_inline)) inline void copy_out(const float* row, const Window& v, int width,
                                                    float* plane) {
  for (int y = v.y0; y < v.y1; ++y) {
    float* dst = plane + v.corner + static_cast<long>(y) * width;
    if (v.x0 == 0 && v.x1 == S) {
      for (int x = 0; x < S; ++x) dst[x] = Add ? dst[x] + row[y * S + x] : row[y * S + x];
    } else {
      for (int x = v.x0; x < v.x1; ++x) dst[x] = Add ? dst[x] + row[y * S + x] : row[y * S + x];
    }
  }
}

template <class T>
__attribute__((always_inline)) inline void input_transform(const T& t, const WinogradTiling& w,
                                                           const float* images, long t0, int count, float* v,
                                                           long ld) {
  constexpr int A = T::kA, P = round16(A * A);
  const ConvGeometry& g = w.g;
  const long plane = static_cast<long>(g.height) * g.width;
  const long position_stride = static_cast<long>(g.channels) * ld;
  alignas(64) float rows[kLanes][P];
  Lanes d[P], mid[A * A], out[A * A];
  for (int b = 0; b < count; b += kLanes) {
    const int lanes = std::min(kLanes, count - b);
    Window windows[kLanes];
    for (int l = 0; l < lanes; ++l) windows[l] = input_window(w, t0 + b + l);
    // What lies outside the image (and unused lanes) stays zero for every channel.
    std::memset(rows, 0, sizeof rows);
    for (int c = 0; c < g.channels; ++c) {
      for (int l = 0; l < lanes; ++l) copy_in<A>(images + c * plane, windows[l], g.width, rows[l]);
      rows_to_lanes(rows, d);
      left<A, A, A, false>(t.bt, d, mid);
      right<A, A, A, false>(mid, t.bt, out);
      store_positions(out, lanes, v + static_cast<long>(c) * ld + b, position_stride);
    }
  }
}

template <class T>
__attribute__((always_inline)) inline void input_grad(const T& t, const WinogradTiling& w, const float* dv,
                                                      long ld, long t0, int count, float* dx) {
  constexpr int A = T::kA, P = round16(A * A);
  const ConvGeometry& g = w.g;
  const long plane = static_cast<long>(g.height) * g.width;
  const long position_stride = static_cast<long>(g.channels) * ld;
  alignas(64) float rows[kLanes][P];
  Lanes in[A * A], mid[A * A], d[P] = {};
  for (int b = 0; b < count; b += kLanes) {
    const int lanes = std::min(kLanes, count - b);
    Window windows[kLanes];
    for (int l = 0; l < lanes; ++l) windows[l] = input_window(w, t0 + b + l);
    for (int c = 0; c < g.channels; ++c) {
      load_positions(dv + static_cast<long>(c) * ld + b, position_stride, lanes, in);
      left<A, A, A, true>(t.bt, in, mid);
      right<A, A, A, true>(mid, t.bt, d);
      lanes_to_rows(d, rows);
      // Neighbouring tiles' windows overlap, so lanes are added one after another.
      for (int l = 0; l < lanes; ++l) copy_out<A, true>(rows[l], windows[l], g.width, dx + c * plane);
    }
  }
}

template <class T>
__attribute__((always_inline)) inline void output_transform(const T& t, const WinogradTiling& w,
                                                            int out_channels, const float* m, long ld,
                                                            long t0, int count, float* y) {
  constexpr int A = T::kA, M = T::kM, P = round16(M * M);
  const int ow = w.g.out_w();
  const long plane = static_cast<long>(w.g.out_h()) * ow;
  const long position_stride = static_cast<long>(out_channels) * ld;
  alignas(64) float rows[kLanes][P];
  Lanes in[A * A], mid[M * A], out[P] = {};
  for (int b = 0; b < count; b += kLanes) {
    const int lanes = std::min(kLanes, count - b);
    Window windows[kLanes];
    for (int l = 0; l < lanes; ++l) windows[l] = output_window(w, out_channels, t0 + b + l);
    for (int k = 0; k < out_channels; ++k) {
      load_positions(m + static_cast<long>(k) * ld + b, position_stride, lanes, in);
      left<M, A, A, false>(t.at, in, mid);
      right<M, A, M, false>(mid, t.at, out);
      lanes_to_rows(out, rows);
      for (int l = 0; l < lanes; ++l) copy_out<M, false>(rows[l], windows[l], ow, y + k * plane);
    }
  }
}

template <class T>
__attribute__((always_inline)) inline void output_grad(const T& t, const WinogradTiling& w, int out_channels,
                                                       const float* dy, long t0, int count, float* dyt,
                                                       long ld) {
  constexpr int A = T::kA, M = T::kM, P = round16(M * M);
  const int ow = w.g.out_w();
  const long plane = static_cast<long>(w.g.out_h()) * ow;
  const long position_stride = static_cast<long>(out_channels) * ld;
  alignas(64) float rows[kLanes][P];
  Lanes in[P], mid[A * M], out[A * A];
  for (int b = 0; b < count; b += kLanes) {
    const int lanes = std::min(kLanes, count - b);
    Window windows[kLanes];
    for (int l = 0; l < lanes; ++l) windows[l] = output_window(w, out_channels, t0 + b + l);
    // Outputs past the edge (and unused lanes) stay zero for every channel.
    std::memset(rows, 0, sizeof rows);
    for (int k = 0; k < out_channels; ++k) {
      for (int l = 0; l < lanes; ++l) copy_in<M>(dy + k * plane, windows[l], ow, rows[l]);
      rows_to_lanes(rows, in);
      left<A, M, M, true>(t.at, in, mid);
      right<A, M, A, true>(mid, t.at, out);
      store_positions(out, lanes, dyt + static_cast<long>(k) * ld + b, position_stride);
    }
  }
}

}  // namespace

bool winograd_applies(const ConvGeometry& g) {
  return (g.kernel_h == 3 || g.kernel_h == 5) && g.kernel_w == g.kernel_h && g.stride == 1 && g.out_h() > 0 &&
         g.out_w() > 0;
}

WinogradTiling::WinogradTiling(const ConvGeometry& geometry, int block) : g(geometry), r(geometry.kernel_h) {
  if (!winograd_applies(g)) throw std::invalid_argument("Winograd: needs a 3x3 or 5x5 kernel, stride 1");
  m = block != 0 ? block : r == 5 ? 3 : 4;
  if (!(r == 5 && m == 3) && !(r == 3 && (m == 4 || m == 2)))
    throw std::invalid_argument("Winograd: F(" + std::to_string(m) + "," + std::to_string(r) +
                                ") is not implemented (F(3,5), F(4,3), F(2,3) are)");
  alpha = m + r - 1;
  tiles_h = (g.out_h() + m - 1) / m;
  tiles_w = (g.out_w() + m - 1) / m;
}

// Each entry point runs the variant's template, inlined into every clone.
#define HEARSAY_WINOGRAD_VARIANT(w, f, ...)      \
  do {                                           \
    if ((w).r == 5) return f(kF35, __VA_ARGS__); \
    if ((w).m == 4) return f(kF43, __VA_ARGS__); \
    return f(kF23, __VA_ARGS__);                 \
  } while (false)

HEARSAY_CLONES void winograd_filter_transform(const WinogradTiling& w, int out_channels, const float* weights,
                                              float* u) {
  const long filters = static_cast<long>(out_channels) * w.g.channels;
  HEARSAY_WINOGRAD_VARIANT(w, filter_transform, filters, weights, u);
}

HEARSAY_CLONES void winograd_filter_grad(const WinogradTiling& w, int out_channels, const float* du,
                                         float* dw) {
  HEARSAY_WINOGRAD_VARIANT(w, filter_grad, out_channels, w.g.channels, du, dw);
}

HEARSAY_CLONES void winograd_input_transform(const WinogradTiling& w, const float* images, long t0, int count,
                                             float* v, long ld) {
  HEARSAY_WINOGRAD_VARIANT(w, input_transform, w, images, t0, count, v, ld);
}

HEARSAY_CLONES void winograd_input_grad(const WinogradTiling& w, const float* dv, long ld, long t0, int count,
                                        float* dx) {
  HEARSAY_WINOGRAD_VARIANT(w, input_grad, w, dv, ld, t0, count, dx);
}

HEARSAY_CLONES void winograd_output_transform(const WinogradTiling& w, int out_channels, const float* m,
                                              long ld, long t0, int count, float* y) {
  HEARSAY_WINOGRAD_VARIANT(w, output_transform, w, out_channels, m, ld, t0, count, y);
}

HEARSAY_CLONES void winograd_output_grad(const WinogradTiling& w, int out_channels, const float* dy, long t0,
                                         int count, float* dyt, long ld) {
  HEARSAY_WINOGRAD_VARIANT(w, output_grad, w, out_channels, dy, t0, count, dyt, ld);
}

}  // namespace hearsay::cpu
