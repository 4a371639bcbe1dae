// im2col / col2im for one image (CHW), with stride and zero padding. The column matrix
// is [C*KH*KW rows x OH*OW cols], row-major with row stride ld (0: OH*OW), so a
// convolution is one GEMM with the weights [OC x C*KH*KW]. A larger ld places several
// images' columns side by side, so one GEMM serves a group of images.
#pragma once

namespace hearsay::cpu {

struct ConvGeometry {
  int channels, height, width;  // input
  int kernel_h, kernel_w, stride, padding;
  int out_h() const { return (height + 2 * padding - kernel_h) / stride + 1; }
  int out_w() const { return (width + 2 * padding - kernel_w) / stride + 1; }
  int col_rows() const { return channels * kernel_h * kernel_w; }
  int col_cols() const { return out_h() * out_w(); }
};

void im2col(const ConvGeometry& g, const float* image, float* columns, long ld = 0);
// image = sum over overlapping windows of columns (overwrites image).
void col2im(const ConvGeometry& g, const float* columns, long ld, float* image);

// The transposed layout ("im2row"): one row of C*KH*KW values per output pixel,
// [OH*OW rows x C*KH*KW cols], row-major and dense. The backward products of a
// convolution run fastest on it (both have N = C*KH*KW, a multiple of the vector width
// or close to it), see small_gemm.hpp.
void im2row(const ConvGeometry& g, const float* image, float* rows);
// image = sum over overlapping windows of rows (overwrites image).
void row2im(const ConvGeometry& g, const float* rows, float* image);

}  // namespace hearsay::cpu
