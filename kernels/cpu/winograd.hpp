// Winograd minimal filtering for stride-1 convolutions (Lavin and Gray, "Fast Algorithms
// for Convolutional Neural Networks", CVPR 2016): F(3x3, 5x5) for 5x5 kernels and
// F(4x4, 3x3) (or F(2x2, 3x3)) for 3x3 kernels, one implementation parametric in the
// output block side m and the filter side r, with the transform matrices as data.
//
// An m x m block of outputs comes from an alpha x alpha input tile (alpha = m + r - 1)
// with alpha^2 multiplications per (output channel, input channel) pair instead of
// m^2 r^2 (F(3,5): 49 instead of 225; F(4,3): 36 instead of 144):
//   U = G g G^T (filter), V = B^T d B (input tile), Y = A^T (sum_c U . V) A.
// The sum over input channels at each of the alpha^2 positions xi is a GEMM, so a
// convolution becomes alpha^2 GEMMs [K x C] x [C x tiles] between two cheap transforms.
// The backward pass runs the adjoint of every step, so it is the exact gradient of
// the forward computation (and of the convolution, up to rounding):
//   dYt = A dY A^T per output tile, dV = U^T dYt and dU = sum over tiles of dYt V^T
//   (alpha^2 GEMMs each), dx += B dV B^T over the (overlapping) input tiles, dg = G^T dU G.
//
// The transforms come from Toom-Cook interpolation points plus infinity. In fp32 a
// single tile's output differs from the direct sum, relative to its largest value, by
// (median / worst over 20000 random tiles, tests/test_winograd.cpp):
//   F(3,5), points 0, 1, -1, 2, -2, -1/2: 1.1e-6 / 1.9e-5 (picked for the smallest
//     worst case among the usual candidates);
//   F(4,3), points 0, 1, -1, 1/2, -1/2: 6.4e-7 / 1.1e-5;
//   F(2,3), points 0, 1, -1: 1e-7 / 1.9e-6 (slower than F(4,3) on every ResNet-20
//     shape, kept for comparison).
//
// Layouts. A transformed tensor is [alpha^2][rows][ld]: the position xi = alpha i + j is
// outermost so that each GEMM reads contiguous rows. Tiles are numbered across a batch
// of CHW images: t = image * tiles_per_image + ty * tiles_w + tx, covering outputs
// [m ty, m ty + m) x [m tx, m tx + m) (clipped at the edge) and reading the padded input
// from (m ty - padding, m tx - padding) on (zeros outside the image).
#pragma once
#include "kernels/cpu/conv.hpp"

namespace hearsay::cpu {

// Whether the geometry is one these kernels compute: a 3x3 or 5x5 kernel with stride 1.
bool winograd_applies(const ConvGeometry& g);

struct WinogradTiling {
  ConvGeometry g;
  int m, r, alpha;  // output block side, filter side, input tile side
  int tiles_h, tiles_w;
  // block 0 picks F(3,5) for 5x5 kernels and F(4,3) for 3x3; 3x3 also takes block 2.
  explicit WinogradTiling(const ConvGeometry& geometry, int block = 0);
  int positions() const { return alpha * alpha; }
  long tiles_per_image() const { return static_cast<long>(tiles_h) * tiles_w; }
};

// U[xi][k][c] = (G w[k][c] G^T)[xi] for weights w [K][C][r][r] (C = w.g.channels).
void winograd_filter_transform(const WinogradTiling& w, int out_channels, const float* weights, float* u);
// dw[k][c] = G^T dU[.][c][k] G (written, not added). dU is [xi][c][k], the layout in
// which the weight-gradient GEMM V * dYt^T produces it.
void winograd_filter_grad(const WinogradTiling& w, int out_channels, const float* du, float* dw);

// V[xi][c][t - t0] = (B^T d_t B)[xi] for the tiles t0 .. t0 + count - 1 of `images`.
void winograd_input_transform(const WinogradTiling& w, const float* images, long t0, int count, float* v,
                              long ld);
// dx += B dV[.][c][t - t0] B^T summed into each tile's input window (dx as `images`).
void winograd_input_grad(const WinogradTiling& w, const float* dv, long ld, long t0, int count, float* dx);

// y[tile's outputs] = A^T M[.][k][t - t0] A for K = out_channels output planes.
void winograd_output_transform(const WinogradTiling& w, int out_channels, const float* m, long ld, long t0,
                               int count, float* y);
// dYt[xi][k][t - t0] = (A dy_t A^T)[xi], dy_t the tile's m x m output gradient (0 outside).
void winograd_output_grad(const WinogradTiling& w, int out_channels, const float* dy, long t0, int count,
                          float* dyt, long ld);

}  // namespace hearsay::cpu
