#include "kernels/cuda/blas.hpp"

#include <dlfcn.h>

#include <stdexcept>

namespace hearsay::cuda {

namespace {

// cuBLAS is loaded the first time a handle is made, not linked: a linked libcublas (with
// libcublasLt) costs every process ~210 MB of resident memory and ~60 ms at start-up in
// relocations, CPU-only peers included, and a simulator runs many of them on one box.
// These are the only entry points hearsay uses, named as the functions are (cublas_v2.h's
// macros turn cublasCreate into cublasCreate_v2 here as in any caller), so that an error
// names the call.
using cublasCreate_fn = decltype(&::cublasCreate_v2);
using cublasDestroy_fn = decltype(&::cublasDestroy_v2);
using cublasSetStream_fn = decltype(&::cublasSetStream_v2);
using cublasGetStream_fn = decltype(&::cublasGetStream_v2);
using cublasSetPointerMode_fn = decltype(&::cublasSetPointerMode_v2);
using cublasSetMathMode_fn = decltype(&::cublasSetMathMode);
using cublasSgemm_fn = decltype(&::cublasSgemm_v2);
using cublasGetStatusName_fn = decltype(&::cublasGetStatusName);
using cublasGetStatusString_fn = decltype(&::cublasGetStatusString);
struct CublasApi {
  cublasCreate_fn cublasCreate = nullptr;
  cublasDestroy_fn cublasDestroy = nullptr;
  cublasSetStream_fn cublasSetStream = nullptr;
  cublasGetStream_fn cublasGetStream = nullptr;
  cublasSetPointerMode_fn cublasSetPointerMode = nullptr;
  cublasSetMathMode_fn cublasSetMathMode = nullptr;
  cublasSgemm_fn cublasSgemm = nullptr;
  cublasGetStatusName_fn cublasGetStatusName = nullptr;
  cublasGetStatusString_fn cublasGetStatusString = nullptr;
  std::string error;  // why it could not be loaded; empty when it was
};

template <class F>
void bind(void* lib, F& fn, const char* name, std::string& error) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (fn == nullptr && error.empty()) error = std::string("no symbol ") + name + " in cuBLAS";
}

CublasApi load_cublas() {
  CublasApi api;
  // The soname first (LD_LIBRARY_PATH and the loader's cache decide), then the library
  // this build was configured with.
  const std::string soname = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) lib = dlopen(HEARSAY_CUBLAS_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    api.error = "cannot load cuBLAS (" + soname + " or " + HEARSAY_CUBLAS_LIBRARY + "): " + (why ? why : "?");
    return api;
  }
  bind(lib, api.cublasCreate, "cublasCreate_v2", api.error);
  bind(lib, api.cublasDestroy, "cublasDestroy_v2", api.error);
  bind(lib, api.cublasSetStream, "cublasSetStream_v2", api.error);
  bind(lib, api.cublasGetStream, "cublasGetStream_v2", api.error);
  bind(lib, api.cublasSetPointerMode, "cublasSetPointerMode_v2", api.error);
  bind(lib, api.cublasSetMathMode, "cublasSetMathMode", api.error);
  bind(lib, api.cublasSgemm, "cublasSgemm_v2", api.error);
  bind(lib, api.cublasGetStatusName, "cublasGetStatusName", api.error);
  bind(lib, api.cublasGetStatusString, "cublasGetStatusString", api.error);
  return api;  // the library stays loaded for the life of the process
}

const CublasApi& cublas() {
  static const CublasApi api = load_cublas();
  return api;
}

// The API, or CudaError saying why cuBLAS is not there.
const CublasApi& loaded_cublas() {
  const CublasApi& api = cublas();
  if (!api.error.empty()) throw CudaError(api.error, -1);
  return api;
}

}  // namespace

std::string cublas_status_text(cublasStatus_t status) {
  const CublasApi& api = cublas();
  if (!api.error.empty()) return "cuBLAS status " + std::to_string(static_cast<int>(status));
  std::string text = api.cublasGetStatusName(status);
  text += ": ";
  text += api.cublasGetStatusString(status);
  return text;
}

BlasHandle::BlasHandle() {
  const CublasApi& api = loaded_cublas();
  HEARSAY_CUBLAS_CHECK(api.cublasCreate(&handle_));
  try {
    HEARSAY_CUBLAS_CHECK(api.cublasSetPointerMode(handle_, CUBLAS_POINTER_MODE_HOST));
    // Plain fp32 FMA arithmetic, set explicitly rather than trusted as the default: no
    // TF32 tensor-core math (see the header).
    HEARSAY_CUBLAS_CHECK(api.cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH));
  } catch (...) {
    destroy();
    throw;
  }
}

BlasHandle& BlasHandle::operator=(BlasHandle&& other) noexcept {
  if (this != &other) {
    destroy();
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

void BlasHandle::destroy() noexcept {
  // A failing destroy (after a sticky device error) leaves nothing a destructor can do.
  if (handle_ != nullptr) (void)cublas().cublasDestroy(handle_);  // a handle exists only if it loaded
  handle_ = nullptr;
}

void BlasHandle::set_stream(cudaStream_t stream) {
  HEARSAY_CUBLAS_CHECK(loaded_cublas().cublasSetStream(handle_, stream));
}

cudaStream_t BlasHandle::stream() const {
  cudaStream_t stream = nullptr;
  HEARSAY_CUBLAS_CHECK(loaded_cublas().cublasGetStream(handle_, &stream));
  return stream;
}

void sgemm(BlasHandle& h, const GemmCall& call, float alpha, const float* a, const float* b, float beta,
           float* c) {
  validate(call);
  if (call.m == 0 || call.n == 0) return;
  if (c == nullptr || (call.k > 0 && (a == nullptr || b == nullptr)))
    throw std::invalid_argument("cuda::sgemm: null device pointer");
  const auto [first, second] = cublas_operands(call, a, b);
  HEARSAY_CUBLAS_CHECK(loaded_cublas().cublasSgemm(
      h.get(), call.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, call.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, call.m,
      call.n, call.k, &alpha, first, call.lda, second, call.ldb, &beta, c, call.ldc));
}

namespace {
void require_pointers(const char* what, const void* p, const void* q, const void* r) {
  if (p == nullptr || q == nullptr || r == nullptr)
    throw std::invalid_argument(std::string(what) + ": null device pointer");
}
}  // namespace

void linear_forward(BlasHandle& h, int batch, int in, int out, const float* x, const float* w, float* y) {
  const GemmCall call = linear_forward_call(batch, in, out);
  require_pointers("cuda::linear_forward", x, w, y);
  sgemm(h, call, 1.0f, x, w, 0.0f, y);
}

void linear_backward_data(BlasHandle& h, int batch, int in, int out, const float* dy, const float* w,
                          float* dx) {
  const GemmCall call = linear_backward_data_call(batch, in, out);
  require_pointers("cuda::linear_backward_data", dy, w, dx);
  sgemm(h, call, 1.0f, dy, w, 0.0f, dx);
}

void linear_backward_weight(BlasHandle& h, int batch, int in, int out, const float* dy, const float* x,
                            float* dw) {
  const GemmCall call = linear_backward_weight_call(batch, in, out);
  require_pointers("cuda::linear_backward_weight", dy, x, dw);
  sgemm(h, call, 1.0f, dy, x, 0.0f, dw);
}

}  // namespace hearsay::cuda
