#include "kernels/cpu/gemm.hpp"

#include <cblas.h>

#include <string>

extern "C" {
// OpenBLAS extensions (declared in its cblas.h too, but not in every packaging of it).
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
char* openblas_get_config(void);
char* openblas_get_corename(void);
}

namespace hearsay::cpu {

void sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc) {
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n,
              k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void set_blas_threads(int threads) { openblas_set_num_threads(threads < 1 ? 1 : threads); }
int blas_threads() { return openblas_get_num_threads(); }

const char* blas_description() {
  static const std::string text = std::string(openblas_get_config()) + " core=" + openblas_get_corename();
  return text.c_str();
}

}  // namespace hearsay::cpu
