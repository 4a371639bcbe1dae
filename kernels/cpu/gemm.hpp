// Single-precision GEMM through OpenBLAS, row-major. Peers are processes, so BLAS is
// kept single-threaded by default; `hearsay train` parallelises over the batch itself.
#pragma once

namespace hearsay::cpu {

// C[M x N] = alpha * op(A)[M x K] * op(B)[K x N] + beta * C, all row-major.
// lda/ldb/ldc are the row strides of A, B, C as stored (before op).
void sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc);

// Number of threads OpenBLAS may use inside one sgemm call.
void set_blas_threads(int threads);
int blas_threads();
// "OpenBLAS 0.3.21 ... SkylakeX" for logs and bench output.
const char* blas_description();

}  // namespace hearsay::cpu
