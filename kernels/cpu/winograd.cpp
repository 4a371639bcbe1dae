#include "kernels/cpu/winograd.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <stdexcept>

#include "kernels/cpu/dispatch.hpp"

namespace hearsay::cpu {

namespace {

constexpr int kA = kWinogradTile, kM = kWinogradOut, kR = kWinogradKernel;
constexpr int kLanes = 16;  // tiles (or filters) transformed side by side, one per vector lane

struct Transforms {
  float at[kM][kA];  // A^T
  float g[kA][kR];   // G
  float bt[kA][kA];  // B^T
};

// Toom-Cook construction for F(m, r) at finite points p_0..p_{n-1} plus infinity.
// Linear convolution evaluates both factors at the points (matrices E), multiplies, and
// interpolates with L, whose column j holds the coefficients of prod_{l != j} (x - p_l)
// (the last column: prod_l (x - p_l)). Correlation is the transpose of that algorithm:
// y = E_m^T [(E_r g) . (L^T d)], so A^T = E_m^T, G = E_r and B^T = L^T, with the
// Lagrange denominators moved into G.
constexpr Transforms make_transforms() {
  constexpr std::array<double, kA - 1> p{0.0, 1.0, -1.0, 2.0, -2.0, -0.5};
  constexpr int n = kA - 1;
  Transforms t{};
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
    for (int k = 0; k < kR; ++k) {
      if (k < kM) t.at[k][j] = static_cast<float>(power);
      t.g[j][k] = static_cast<float>(power / denominator);
      power *= p[j];
    }
    double coef[kA];
    product_without(j, coef);
    for (int q = 0; q < kA; ++q) t.bt[j][q] = static_cast<float>(coef[q]);
  }
  t.at[kM - 1][n] = 1.0f;
  t.g[n][kR - 1] = 1.0f;
  double coef[kA];
  product_without(-1, coef);
  for (int q = 0; q < kA; ++q) t.bt[n][q] = static_cast<float>(coef[q]);
  return t;
}

constexpr Transforms kT = make_transforms();

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

// The 49 positions of `lanes` consecutive tiles (or filters) of a transformed tensor
// [xi][rows][ld]: p points at the first one's row, position_stride = rows * ld.
__attribute__((always_inline)) inline void load_positions(const float* p, long position_stride, int lanes,
                                                          Lanes (&v)[kA * kA]) {
  for (int xi = 0; xi < kA * kA; ++xi) load_lanes(p + xi * position_stride, lanes, v[xi]);
}

__attribute__((always_inline)) inline void store_positions(const Lanes (&v)[kA * kA], int lanes, float* p,
                                                           long position_stride) {
  for (int xi = 0; xi < kA * kA; ++xi) store_lanes(v[xi], lanes, p + xi * position_stride);
}

// Lane matrices are [rows][cols] of Lanes. m(i, y) is M[i][y], or M[y][i] when Trans.
// out[i][x] = sum_y m(i, y) in[y][x]
template <int R, int S, int X, bool Trans, int MR, int MC>
__attribute__((always_inline)) inline void left(const float (&m)[MR][MC], const Lanes* in, Lanes* out) {
  for (int i = 0; i < R; ++i)
    for (int x = 0; x < X; ++x) {
      Lanes acc{};
      for (int y = 0; y < S; ++y) acc += (Trans ? m[y][i] : m[i][y]) * in[y * X + x];
      out[i * X + x] = acc;
    }
}

// out[y][j] = sum_x in[y][x] m(j, x)
template <int Y, int X, int R, bool Trans, int MR, int MC>
__attribute__((always_inline)) inline void right(const Lanes* in, const float (&m)[MR][MC], Lanes* out) {
  for (int y = 0; y < Y; ++y)
    for (int j = 0; j < R; ++j) {
      Lanes acc{};
      for (int x = 0; x < X; ++x) acc += (Trans ? m[x][j] : m[j][x]) * in[y * X + x];
      out[y * R + j] = acc;
    }
}

// Where one lane's tile lies: its image and the top-left corner of its output block.
struct TileSpot {
  long image;
  int oy, ox;
};

inline TileSpot spot(const WinogradTiling& w, long t) {
  const long image = t / w.tiles_per_image();
  const long within = t - image * w.tiles_per_image();
  return {image, static_cast<int>(within / w.tiles_w) * kM, static_cast<int>(within % w.tiles_w) * kM};
}

}  // namespace

bool winograd_applies(const ConvGeometry& g) {
  return g.kernel_h == kR && g.kernel_w == kR && g.stride == 1 && g.out_h() > 0 && g.out_w() > 0;
}

WinogradTiling::WinogradTiling(const ConvGeometry& geometry) : g(geometry) {
  if (!winograd_applies(g)) throw std::invalid_argument("Winograd F(3x3,5x5): needs a 5x5 kernel, stride 1");
  tiles_h = (g.out_h() + kM - 1) / kM;
  tiles_w = (g.out_w() + kM - 1) / kM;
}

HEARSAY_CLONES void winograd_filter_transform(int out_channels, int in_channels, const float* w, float* u) {
  const long filters = static_cast<long>(out_channels) * in_channels;
  Lanes in[kR * kR], mid[kA * kR], out[kA * kA];
  for (long f0 = 0; f0 < filters; f0 += kLanes) {
    const int lanes = static_cast<int>(std::min<long>(kLanes, filters - f0));
    for (int e = 0; e < kR * kR; ++e) {
      in[e] = Lanes{};
      for (int l = 0; l < lanes; ++l) in[e][l] = w[(f0 + l) * kR * kR + e];
    }
    left<kA, kR, kR, false>(kT.g, in, mid);
    right<kA, kR, kA, false>(mid, kT.g, out);
    store_positions(out, lanes, u + f0, filters);  // [xi][k][c]
  }
}

HEARSAY_CLONES void winograd_filter_grad(int out_channels, int in_channels, const float* du, float* dw) {
  const long filters = static_cast<long>(out_channels) * in_channels;
  Lanes in[kA * kA], mid[kR * kA], out[kR * kR];
  for (long f0 = 0; f0 < filters; f0 += kLanes) {
    const int lanes = static_cast<int>(std::min<long>(kLanes, filters - f0));
    load_positions(du + f0, filters, lanes, in);
    left<kR, kA, kA, true>(kT.g, in, mid);
    right<kR, kA, kR, true>(mid, kT.g, out);
    for (int l = 0; l < lanes; ++l) {
      // Lane l holds du's filter f0 + l, in its (c, k) order; dw is [k][c].
      const long f = f0 + l, filter = (f % out_channels) * in_channels + f / out_channels;
      for (int e = 0; e < kR * kR; ++e) dw[filter * kR * kR + e] = out[e][l];
    }
  }
}

HEARSAY_CLONES void winograd_input_transform(const WinogradTiling& w, const float* images, long t0, int count,
                                             float* v, long ld) {
  const ConvGeometry& g = w.g;
  const long plane = static_cast<long>(g.height) * g.width, image_size = plane * g.channels;
  const long position_stride = static_cast<long>(g.channels) * ld;
  Lanes d[kA * kA];
  Lanes mid[kA * kA], out[kA * kA];
  for (int b = 0; b < count; b += kLanes) {
    const int lanes = std::min(kLanes, count - b);
    TileSpot spots[kLanes];
    bool inside[kLanes];
    for (int l = 0; l < lanes; ++l) {
      spots[l] = spot(w, t0 + b + l);
      const int iy = spots[l].oy - g.padding, ix = spots[l].ox - g.padding;
      inside[l] = iy >= 0 && ix >= 0 && iy + kA <= g.height && ix + kA <= g.width;
    }
    if (lanes < kLanes) std::fill(std::begin(d), std::end(d), Lanes{});
    for (int c = 0; c < g.channels; ++c) {
      for (int l = 0; l < lanes; ++l) {
        const int iy0 = spots[l].oy - g.padding, ix0 = spots[l].ox - g.padding;
        const float* src = images + spots[l].image * image_size + c * plane;
        if (inside[l]) {
          const float* corner = src + static_cast<long>(iy0) * g.width + ix0;
          for (int y = 0; y < kA; ++y)
            for (int x = 0; x < kA; ++x) d[y * kA + x][l] = corner[static_cast<long>(y) * g.width + x];
          continue;
        }
        for (int y = 0; y < kA; ++y)
          for (int x = 0; x < kA; ++x) {
            const int iy = iy0 + y, ix = ix0 + x;
            const bool in_image = iy >= 0 && iy < g.height && ix >= 0 && ix < g.width;
            d[y * kA + x][l] = in_image ? src[static_cast<long>(iy) * g.width + ix] : 0.0f;
          }
      }
      left<kA, kA, kA, false>(kT.bt, d, mid);
      right<kA, kA, kA, false>(mid, kT.bt, out);
      store_positions(out, lanes, v + static_cast<long>(c) * ld + b, position_stride);
    }
  }
}

HEARSAY_CLONES void winograd_input_grad(const WinogradTiling& w, const float* dv, long ld, long t0, int count,
                                        float* dx) {
  const ConvGeometry& g = w.g;
  const long plane = static_cast<long>(g.height) * g.width, image_size = plane * g.channels;
  const long position_stride = static_cast<long>(g.channels) * ld;
  Lanes in[kA * kA], mid[kA * kA];
  Lanes d[kA * kA];
  for (int b = 0; b < count; b += kLanes) {
    const int lanes = std::min(kLanes, count - b);
    TileSpot spots[kLanes];
    for (int l = 0; l < lanes; ++l) spots[l] = spot(w, t0 + b + l);
    for (int c = 0; c < g.channels; ++c) {
      load_positions(dv + static_cast<long>(c) * ld + b, position_stride, lanes, in);
      left<kA, kA, kA, true>(kT.bt, in, mid);
      right<kA, kA, kA, true>(mid, kT.bt, d);
      // Neighbouring tiles' windows overlap, so lanes are added one after another.
      for (int l = 0; l < lanes; ++l) {
        const int iy0 = spots[l].oy - g.padding, ix0 = spots[l].ox - g.padding;
        float* dst = dx + spots[l].image * image_size + c * plane;
        const int x_begin = std::max(0, -ix0), x_end = std::min(kA, g.width - ix0);
        for (int y = std::max(0, -iy0); y < std::min(kA, g.height - iy0); ++y) {
          float* row = dst + static_cast<long>(iy0 + y) * g.width + ix0;
          for (int x = x_begin; x < x_end; ++x) row[x] += d[y * kA + x][l];
        }
      }
    }
  }
}

HEARSAY_CLONES void winograd_output_transform(const WinogradTiling& w, int out_channels, const float* m,
                                              long ld, long t0, int count, float* y) {
  const ConvGeometry& g = w.g;
  const int oh = g.out_h(), ow = g.out_w();
  const long plane = static_cast<long>(oh) * ow, image_size = plane * out_channels;
  const long position_stride = static_cast<long>(out_channels) * ld;
  Lanes in[kA * kA], mid[kM * kA];
  Lanes out[kM * kM];
  for (int b = 0; b < count; b += kLanes) {
    const int lanes = std::min(kLanes, count - b);
    TileSpot spots[kLanes];
    for (int l = 0; l < lanes; ++l) spots[l] = spot(w, t0 + b + l);
    for (int k = 0; k < out_channels; ++k) {
      load_positions(m + static_cast<long>(k) * ld + b, position_stride, lanes, in);
      left<kM, kA, kA, false>(kT.at, in, mid);
      right<kM, kA, kM, false>(mid, kT.at, out);
      for (int l = 0; l < lanes; ++l) {
        float* dst =
            y + spots[l].image * image_size + k * plane + static_cast<long>(spots[l].oy) * ow + spots[l].ox;
        const int rows = std::min(kM, oh - spots[l].oy), cols = std::min(kM, ow - spots[l].ox);
        for (int i = 0; i < rows; ++i)
          for (int j = 0; j < cols; ++j) dst[static_cast<long>(i) * ow + j] = out[i * kM + j][l];
      }
    }
  }
}

HEARSAY_CLONES void winograd_output_grad(const WinogradTiling& w, int out_channels, const float* dy, long t0,
                                         int count, float* dyt, long ld) {
  const ConvGeometry& g = w.g;
  const int oh = g.out_h(), ow = g.out_w();
  const long plane = static_cast<long>(oh) * ow, image_size = plane * out_channels;
  const long position_stride = static_cast<long>(out_channels) * ld;
  Lanes in[kM * kM];
  Lanes mid[kA * kM], out[kA * kA];
  for (int b = 0; b < count; b += kLanes) {
    const int lanes = std::min(kLanes, count - b);
    TileSpot spots[kLanes];
    bool whole = lanes == kLanes;
    for (int l = 0; l < lanes; ++l) {
      spots[l] = spot(w, t0 + b + l);
      whole = whole && spots[l].oy + kM <= oh && spots[l].ox + kM <= ow;
    }
    for (int k = 0; k < out_channels; ++k) {
      if (!whole) std::fill(std::begin(in), std::end(in), Lanes{});
      for (int l = 0; l < lanes; ++l) {
        const float* src =
            dy + spots[l].image * image_size + k * plane + static_cast<long>(spots[l].oy) * ow + spots[l].ox;
        const int rows = std::min(kM, oh - spots[l].oy), cols = std::min(kM, ow - spots[l].ox);
        for (int i = 0; i < rows; ++i)
          for (int j = 0; j < cols; ++j) in[i * kM + j][l] = src[static_cast<long>(i) * ow + j];
      }
      left<kA, kM, kM, true>(kT.at, in, mid);
      right<kA, kM, kA, true>(mid, kT.at, out);
      store_positions(out, lanes, dyt + static_cast<long>(k) * ld + b, position_stride);
    }
  }
}

}  // namespace hearsay::cpu
