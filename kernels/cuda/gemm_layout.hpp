// The arithmetic of the cuBLAS calls, in plain C++ (no CUDA headers) so that it is tested
// on every build (tests/test_cuda_layout.cpp): our matrices are row-major, cuBLAS is
// column-major. A row-major M x N matrix with row stride ld is, read column-major, its
// transpose (N x M, leading dimension ld). So a row-major C = op(A) op(B) is computed as
// the column-major C^T = op(B)^T op(A)^T: the operands swap places, the dimensions M and
// N swap, and each transpose flag and leading dimension stays with its matrix.
#pragma once
#include <stdexcept>
#include <string>
#include <utility>

namespace hearsay::cuda {

// One column-major cublasSgemm call: C = alpha * op(first) op(second) + beta * C, with
// op(first) m x k, op(second) k x n, C m x n, in cuBLAS's own terms.
struct GemmCall {
  bool trans_a = false, trans_b = false;  // CUBLAS_OP_T for cuBLAS's A (first) / B (second)
  int m = 0, n = 0, k = 0;
  int lda = 0, ldb = 0, ldc = 0;
  // True: cuBLAS's A is the row-major product's B and cuBLAS's B its A (always so for a
  // row-major product; kept explicit so that callers never guess, see cublas_operands).
  bool swap_operands = false;
};

// The row-major operands in the order cuBLAS takes them: {first, second}.
template <class T>
std::pair<T*, T*> cublas_operands(const GemmCall& call, T* a, T* b) {
  return call.swap_operands ? std::pair<T*, T*>{b, a} : std::pair<T*, T*>{a, b};
}

// Throws std::invalid_argument unless cuBLAS would accept the call: non-negative sizes,
// and each leading dimension at least the stored matrix's column height (and >= 1).
inline void validate(const GemmCall& c) {
  auto fail = [](const std::string& what) { throw std::invalid_argument("GemmCall: " + what); };
  if (c.m < 0 || c.n < 0 || c.k < 0) fail("negative size");
  auto at_least = [](int rows) { return rows > 1 ? rows : 1; };
  // Stored column-major: A is m x k (k x m when transposed), B is k x n (n x k), C m x n.
  if (c.lda < at_least(c.trans_a ? c.k : c.m)) fail("lda " + std::to_string(c.lda) + " too small");
  if (c.ldb < at_least(c.trans_b ? c.n : c.k)) fail("ldb " + std::to_string(c.ldb) + " too small");
  if (c.ldc < at_least(c.m)) fail("ldc " + std::to_string(c.ldc) + " too small");
}

// The cuBLAS call for the row-major C[M x N] = op(A)[M x K] op(B)[K x N], with the
// arguments of cpu::sgemm (lda/ldb/ldc: row strides of A, B, C as stored, before op).
inline GemmCall row_major_gemm_call(bool trans_a, bool trans_b, int m, int n, int k, int lda, int ldb,
                                    int ldc) {
  GemmCall call;
  // C^T[N x M] = op(B)^T[N x K] op(A)^T[K x M]. Row-major B (as stored) read column-major
  // is B^T: op(B)^T needs no further transpose when op(B) = B, and one when op(B) = B^T.
  call.trans_a = trans_b;
  call.trans_b = trans_a;
  call.m = n;
  call.n = m;
  call.k = k;
  call.lda = ldb;
  call.ldb = lda;
  call.ldc = ldc;
  call.swap_operands = true;
  validate(call);
  return call;
}

// Linear with x [batch x in], W [out x in] (PyTorch), y [batch x out], all row-major and
// dense. Operands in row-major terms: A then B, as named in each comment.
inline void check_linear_sizes(int batch, int in, int out) {
  if (batch <= 0 || in <= 0 || out <= 0)
    throw std::invalid_argument("linear: batch " + std::to_string(batch) + ", in " + std::to_string(in) +
                                ", out " + std::to_string(out) + " must be positive");
}

// y[batch x out] = x[batch x in] W^T: A = x, B = W.
inline GemmCall linear_forward_call(int batch, int in, int out) {
  check_linear_sizes(batch, in, out);
  return row_major_gemm_call(false, true, batch, out, in, in, in, out);
}

// dx[batch x in] = dy[batch x out] W[out x in]: A = dy, B = W.
inline GemmCall linear_backward_data_call(int batch, int in, int out) {
  check_linear_sizes(batch, in, out);
  return row_major_gemm_call(false, false, batch, in, out, out, in, in);
}

// dW[out x in] = dy^T[out x batch] x[batch x in]: A = dy, B = x.
inline GemmCall linear_backward_weight_call(int batch, int in, int out) {
  check_linear_sizes(batch, in, out);
  return row_major_gemm_call(true, false, out, in, batch, out, in, in);
}

}  // namespace hearsay::cuda
