// The numbers of a cuDNN convolution, in plain C++ (no CUDA headers) so that they are
// tested on every build against the CPU layers (tests/test_cuda_layout.cpp): the tensor
// descriptors of x (NCHW), the filter (KCRS, i.e. PyTorch's OIHW) and y, and the
// convolution's padding, stride and dilation. kernels/cuda/dnn.cpp sets the descriptors
// from exactly these values.
#pragma once
#include <array>
#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cpu/conv.hpp"

namespace hearsay::cuda {

struct ConvDescriptors {
  int n, c, h, w;  // input x, NCHW
  int k, r, s;     // filter: output channels, kernel height, kernel width
  int pad_h, pad_w, stride_h, stride_w, dil_h, dil_w;
  int out_n, out_c, out_h, out_w;  // output y, NCHW
  // Element strides of dims N, C, H, W: packed NCHW, so x[n][c][h][w] is at
  // n*x_strides[0] + c*x_strides[1] + h*x_strides[2] + w*x_strides[3].
  int x_strides[4], y_strides[4];

  std::int64_t x_elements() const { return std::int64_t{n} * x_strides[0]; }
  std::int64_t y_elements() const { return std::int64_t{out_n} * y_strides[0]; }
  std::int64_t w_elements() const { return std::int64_t{k} * c * r * s; }
};

// cuDNN's output size (cudnnGetConvolution2dForwardOutputDim's formula) for one spatial
// dimension. Needs in + 2 pad >= the dilated filter extent.
inline int cudnn_output_dim(int in, int pad, int filter, int stride, int dilation) {
  return 1 + (in + 2 * pad - ((filter - 1) * dilation + 1)) / stride;
}

namespace detail {
// Packed NCHW strides; throws when the tensor exceeds what cuDNN's int-sized
// descriptors take (its legacy API limits a tensor to 2^31 - 1 elements).
inline void packed_nchw_strides(int n, int c, int h, int w, int strides[4]) {
  const std::int64_t hw = std::int64_t{h} * w, chw = hw * c;
  if (chw * n > INT_MAX)
    throw std::invalid_argument("conv_descriptors: tensor of " + std::to_string(chw * n) +
                                " elements is too large for cuDNN's descriptors");
  strides[0] = static_cast<int>(chw);
  strides[1] = static_cast<int>(hw);
  strides[2] = w;
  strides[3] = 1;
}
}  // namespace detail

// Descriptors for a batch of `batch` images of geometry `g` convolved with `out_channels`
// filters (cross-correlation, zero padding, dilation 1, as the CPU Conv2d). Throws
// std::invalid_argument for non-positive sizes, negative padding, or a kernel larger than
// the padded input.
inline ConvDescriptors conv_descriptors(const cpu::ConvGeometry& g, int batch, int out_channels) {
  if (batch <= 0 || out_channels <= 0 || g.channels <= 0 || g.height <= 0 || g.width <= 0 ||
      g.kernel_h <= 0 || g.kernel_w <= 0 || g.stride <= 0 || g.padding < 0)
    throw std::invalid_argument("conv_descriptors: sizes, kernel and stride must be positive, padding >= 0");
  if (g.height + 2 * g.padding < g.kernel_h || g.width + 2 * g.padding < g.kernel_w)
    throw std::invalid_argument("conv_descriptors: kernel " + std::to_string(g.kernel_h) + "x" +
                                std::to_string(g.kernel_w) + " is larger than the padded input " +
                                std::to_string(g.height + 2 * g.padding) + "x" +
                                std::to_string(g.width + 2 * g.padding));
  ConvDescriptors d{};
  d.n = batch;
  d.c = g.channels;
  d.h = g.height;
  d.w = g.width;
  d.k = out_channels;
  d.r = g.kernel_h;
  d.s = g.kernel_w;
  d.pad_h = d.pad_w = g.padding;
  d.stride_h = d.stride_w = g.stride;
  d.dil_h = d.dil_w = 1;
  d.out_n = batch;
  d.out_c = out_channels;
  d.out_h = cudnn_output_dim(d.h, d.pad_h, d.r, d.stride_h, d.dil_h);
  d.out_w = cudnn_output_dim(d.w, d.pad_w, d.s, d.stride_w, d.dil_w);
  detail::packed_nchw_strides(d.n, d.c, d.h, d.w, d.x_strides);
  detail::packed_nchw_strides(d.out_n, d.out_c, d.out_h, d.out_w, d.y_strides);
  if (d.w_elements() > INT_MAX) throw std::invalid_argument("conv_descriptors: filter too large for cuDNN");
  return d;
}

// What a convolution plan is chosen for: batch, the input's geometry, output channels.
using ConvPlanKey = std::array<int, 9>;
inline ConvPlanKey conv_plan_key(const cpu::ConvGeometry& g, int batch, int out_channels) {
  return {batch, g.channels, g.height, g.width, g.kernel_h, g.kernel_w, g.stride, g.padding, out_channels};
}

}  // namespace hearsay::cuda
