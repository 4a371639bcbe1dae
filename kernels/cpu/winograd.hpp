// Winograd minimal filtering F(3x3, 5x5) for 5x5 convolutions with stride 1 (Lavin and
// Gray, "Fast Algorithms for Convolutional Neural Networks", CVPR 2016).
//
// A 3x3 block of outputs comes from a 7x7 input tile with 49 multiplications per
// (output channel, input channel) pair instead of 225:
//   U = G g G^T (filter, 7x7), V = B^T d B (input tile, 7x7), Y = A^T (sum_c U . V) A.
// The sum over input channels at each of the 49 positions xi is a GEMM, so a
// convolution becomes 49 GEMMs [K x C] x [C x tiles] between two cheap transforms.
// The backward pass runs the adjoint of every step, so it is the exact gradient of
// the forward computation (and of the convolution, up to rounding):
//   dYt = A dY A^T per output tile, dV = U^T dYt and dU = sum over tiles of dYt V^T
//   (49 GEMMs each), dx += B dV B^T over the (overlapping) input tiles, dg = G^T dU G.
//
// The transforms come from the interpolation points 0, 1, -1, 2, -2, -1/2 and infinity
// (Toom-Cook). In fp32 a single tile's output differs from the direct sum by about 1e-6
// of its largest value (1e-5 at worst over many random tiles); the points were picked
// for the smallest worst case among the usual candidates.
//
// Layouts. A transformed tensor is [49][rows][ld]: the position xi = 7 i + j is
// outermost so that each GEMM reads contiguous rows. Tiles are numbered across a batch
// of CHW images: t = image * tiles_per_image + ty * tiles_w + tx, covering outputs
// [3 ty, 3 ty + 3) x [3 tx, 3 tx + 3) (clipped at the edge) and reading the padded input
// from (3 ty - padding, 3 tx - padding) on (zeros outside the image).
#pragma once
#include "kernels/cpu/conv.hpp"

namespace hearsay::cpu {

constexpr int kWinogradTile = 7;        // input tile side (alpha = m + r - 1)
constexpr int kWinogradPositions = 49;  // alpha^2 GEMMs per convolution
constexpr int kWinogradOut = 3;         // output block side (m)
constexpr int kWinogradKernel = 5;      // filter side (r)

// Whether the geometry is one these kernels compute: a 5x5 kernel with stride 1.
bool winograd_applies(const ConvGeometry& g);

struct WinogradTiling {
  ConvGeometry g;
  int tiles_h, tiles_w;
  explicit WinogradTiling(const ConvGeometry& geometry);
  long tiles_per_image() const { return static_cast<long>(tiles_h) * tiles_w; }
};

// U[xi][k][c] = (G w[k][c] G^T)[xi] for weights w [K][C][5][5].
void winograd_filter_transform(int out_channels, int in_channels, const float* w, float* u);
// dw[k][c] = G^T dU[.][c][k] G (written, not added). dU is [xi][c][k], the layout in
// which the weight-gradient GEMM V * dYt^T produces it.
void winograd_filter_grad(int out_channels, int in_channels, const float* du, float* dw);

// V[xi][c][t - t0] = (B^T d_t B)[xi] for the tiles t0 .. t0 + count - 1 of `images`.
void winograd_input_transform(const WinogradTiling& w, const float* images, long t0, int count, float* v,
                              long ld);
// dx += B dV[.][c][t - t0] B^T summed into each tile's input window (dx as `images`).
void winograd_input_grad(const WinogradTiling& w, const float* dv, long ld, long t0, int count, float* dx);

// y[tile's outputs] = A^T M[.][k][t - t0] A for K = out_channels output planes.
void winograd_output_transform(const WinogradTiling& w, int out_channels, const float* m, long ld, long t0,
                               int count, float* y);
// dYt[xi][k][t - t0] = (A dy_t A^T)[xi], dy_t the tile's 3x3 output gradient (0 outside).
void winograd_output_grad(const WinogradTiling& w, int out_channels, const float* dy, long t0, int count,
                          float* dyt, long ld);

}  // namespace hearsay::cpu
