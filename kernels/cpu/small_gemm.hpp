// GEMM for the small, oddly shaped products inside convolution layers (LeNet's second
// convolution: 50x500 times 500x81 per image, and its two backward products).
//
// OpenBLAS packs both operands on every call; at these sizes packing costs as much as the
// multiply, and its 16-wide tiles waste lanes on N = 81. This kernel reads A in place
// through two strides (so A or its transpose is used without packing), keeps a
// 32-column panel of B in L1 while every row block passes over it, and broadcasts A's
// elements straight from memory into the FMAs.
#pragma once

namespace hearsay::cpu {

// C[m x n] = A[m x k] * B[k x n]   (accumulate: C += A * B)
// A(i, p) = a[i * a_row + p * a_col]; B and C are row-major with row strides ldb, ldc.
// Without AVX-512 (or for strides BLAS cannot express) it falls back to OpenBLAS or to
// plain loops, with the same result up to summation order.
void small_gemm(int m, int n, int k, const float* a, long a_row, long a_col, const float* b, long ldb,
                float* c, long ldc, bool accumulate);

}  // namespace hearsay::cpu
