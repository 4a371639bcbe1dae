#include "kernels/cuda/dnn.hpp"

#include <algorithm>
#include <iterator>
#include <stdexcept>
#include <tuple>
#include <vector>

namespace hearsay::cuda {

std::string cudnn_status_text(cudnnStatus_t status) { return cudnnGetErrorString(status); }

DnnHandle::DnnHandle() { HEARSAY_CUDNN_CHECK(cudnnCreate(&handle_)); }

DnnHandle& DnnHandle::operator=(DnnHandle&& other) noexcept {
  if (this != &other) {
    destroy();
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

void DnnHandle::destroy() noexcept {
  // A failing destroy (after a sticky device error) leaves nothing a destructor can do.
  if (handle_ != nullptr) (void)cudnnDestroy(handle_);
  handle_ = nullptr;
}

void DnnHandle::set_stream(cudaStream_t stream) { HEARSAY_CUDNN_CHECK(cudnnSetStream(handle_, stream)); }

cudaStream_t DnnHandle::stream() const {
  cudaStream_t stream = nullptr;
  HEARSAY_CUDNN_CHECK(cudnnGetStream(handle_, &stream));
  return stream;
}

void ConvWorkspace::reserve(std::size_t bytes, cudaStream_t stream) {
  if (bytes <= buffer_.bytes()) return;
  // Allocate before freeing: if the allocation fails, the plans sized to the old buffer
  // still have it.
  DeviceBuffer<unsigned char> bigger(bytes);
  HEARSAY_CUDA_CHECK(cudaStreamSynchronize(stream));
  buffer_ = std::move(bigger);
}

namespace {

const char* algo_name(cudnnConvolutionFwdAlgo_t a) {
  static const char* const names[] = {
      "IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
      "WINOGRAD",      "WINOGRAD_NONFUSED"};
  const auto i = static_cast<std::size_t>(a);
  return i < std::size(names) ? names[i] : "?";
}
const char* algo_name(cudnnConvolutionBwdDataAlgo_t a) {
  static const char* const names[] = {"ALGO_0",     "ALGO_1",   "FFT",
                                      "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  const auto i = static_cast<std::size_t>(a);
  return i < std::size(names) ? names[i] : "?";
}
const char* algo_name(cudnnConvolutionBwdFilterAlgo_t a) {
  static const char* const names[] = {"ALGO_0",    "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED",
                                      "FFT_TILING"};
  const auto i = static_cast<std::size_t>(a);
  return i < std::size(names) ? names[i] : "?";
}

// "8x1x28x28 * 20x1x3x3 s1 p0 -> 8x20x26x26"
std::string shape_text(const ConvDescriptors& d) {
  auto dims = [](int a, int b, int c, int e) {
    return std::to_string(a) + "x" + std::to_string(b) + "x" + std::to_string(c) + "x" + std::to_string(e);
  };
  return dims(d.n, d.c, d.h, d.w) + " * " + dims(d.k, d.c, d.r, d.s) + " s" + std::to_string(d.stride_h) +
         " p" + std::to_string(d.pad_h) + " -> " + dims(d.out_n, d.out_c, d.out_h, d.out_w);
}

bool uses_tensor_cores(cudnnMathType_t m) {
  return m == CUDNN_TENSOR_OP_MATH || m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

// Chooses from cuDNN's heuristic ranking (best expected first): the first algorithm that
// is supported, does not use tensor-core math, and whose workspace fits `limit` (asked of
// cuDNN again with the algorithm: that is the size the call will need), preferring a
// deterministic one (the same gradients from the same inputs, run after run) over a
// faster one that is not. Returns the algorithm and its workspace size.
template <class Perf, class WorkspaceOf>
auto pick_algorithm(const std::vector<Perf>& ranked, std::size_t limit, WorkspaceOf&& workspace_of,
                    const char* what, const std::string& shape) {
  for (const bool deterministic_only : {true, false}) {
    for (const Perf& p : ranked) {
      if (p.status != CUDNN_STATUS_SUCCESS || uses_tensor_cores(p.mathType)) continue;
      if (deterministic_only && p.determinism != CUDNN_DETERMINISTIC) continue;
      std::size_t bytes = 0;
      if (workspace_of(p.algo, &bytes) != CUDNN_STATUS_SUCCESS || bytes > limit) continue;
      return std::pair{p.algo, bytes};
    }
  }
  throw std::runtime_error("ConvPlan: no cuDNN " + std::string(what) + " algorithm for " + shape +
                           " within " + std::to_string(limit) + " bytes of workspace (of " +
                           std::to_string(ranked.size()) + " ranked)");
}

// All of cuDNN's ranking: `count` is the MaxCount query's answer.
template <class Perf, class Get>
std::vector<Perf> ranking(int count, Get&& get) {
  std::vector<Perf> ranked(static_cast<std::size_t>(std::max(count, 1)));
  int returned = 0;
  HEARSAY_CUDNN_CHECK(get(static_cast<int>(ranked.size()), &returned, ranked.data()));
  ranked.resize(static_cast<std::size_t>(std::clamp(returned, 0, static_cast<int>(ranked.size()))));
  return ranked;
}

void require_pointers(const char* what, const void* p, const void* q, const void* r) {
  if (p == nullptr || q == nullptr || r == nullptr)
    throw std::invalid_argument(std::string("ConvPlan::") + what + ": null device pointer");
}

}  // namespace

ConvPlan::ConvPlan(DnnHandle& handle, const cpu::ConvGeometry& g, int batch, int out_channels,
                   ConvWorkspace* workspace, std::size_t workspace_limit)
    : handle_(handle),
      layout_(conv_descriptors(g, batch, out_channels)),
      workspace_(workspace != nullptr ? workspace : &own_workspace_) {
  set_descriptors();
  choose_algorithms(workspace_limit);
  workspace_bytes_ = std::max({forward_bytes_, backward_data_bytes_, backward_filter_bytes_});
  workspace_->reserve(workspace_bytes_, handle_.stream());
}

void ConvPlan::set_descriptors() {
  const ConvDescriptors& d = layout_;
  cudnnTensorDescriptor_t t = nullptr;
  HEARSAY_CUDNN_CHECK(cudnnCreateTensorDescriptor(&t));
  x_desc_.reset(t);
  HEARSAY_CUDNN_CHECK(cudnnSetTensor4dDescriptorEx(x_desc_.get(), CUDNN_DATA_FLOAT, d.n, d.c, d.h, d.w,
                                                   d.x_strides[0], d.x_strides[1], d.x_strides[2],
                                                   d.x_strides[3]));
  HEARSAY_CUDNN_CHECK(cudnnCreateTensorDescriptor(&t));
  y_desc_.reset(t);
  HEARSAY_CUDNN_CHECK(cudnnSetTensor4dDescriptorEx(y_desc_.get(), CUDNN_DATA_FLOAT, d.out_n, d.out_c, d.out_h,
                                                   d.out_w, d.y_strides[0], d.y_strides[1], d.y_strides[2],
                                                   d.y_strides[3]));
  cudnnFilterDescriptor_t f = nullptr;
  HEARSAY_CUDNN_CHECK(cudnnCreateFilterDescriptor(&f));
  w_desc_.reset(f);
  // NCHW for a filter means KCRS: PyTorch's [out][in][kh][kw].
  HEARSAY_CUDNN_CHECK(
      cudnnSetFilter4dDescriptor(w_desc_.get(), CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, d.k, d.c, d.r, d.s));
  cudnnConvolutionDescriptor_t c = nullptr;
  HEARSAY_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&c));
  conv_desc_.reset(c);
  // Cross-correlation (no filter flip) is what the CPU layer and PyTorch compute.
  HEARSAY_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv_desc_.get(), d.pad_h, d.pad_w, d.stride_h,
                                                      d.stride_w, d.dil_h, d.dil_w, CUDNN_CROSS_CORRELATION,
                                                      CUDNN_DATA_FLOAT));
  HEARSAY_CUDNN_CHECK(
      cudnnSetConvolutionMathType(conv_desc_.get(), CUDNN_FMA_MATH));  // no TF32, see the header
  // cuDNN's own output size must be the one conv_layout.hpp computed (and the host tests
  // compared with the CPU layer's).
  int n = 0, k = 0, h = 0, w = 0;
  HEARSAY_CUDNN_CHECK(
      cudnnGetConvolution2dForwardOutputDim(conv_desc_.get(), x_desc_.get(), w_desc_.get(), &n, &k, &h, &w));
  if (n != d.out_n || k != d.out_c || h != d.out_h || w != d.out_w)
    throw std::logic_error("ConvPlan: cuDNN's output " + std::to_string(n) + "x" + std::to_string(k) + "x" +
                           std::to_string(h) + "x" + std::to_string(w) + " differs from " + shape_text(d));
}

// Heuristics (cudnnGet*_v7) rather than benchmarks (cudnnFind*): the choice is the same on
// every run of the same GPU and cuDNN, needs no device memory or timing runs, and is made
// once per plan.
void ConvPlan::choose_algorithms(std::size_t limit) {
  cudnnHandle_t h = handle_.get();
  auto x = x_desc_.get(), y = y_desc_.get();
  auto w = w_desc_.get();
  auto conv = conv_desc_.get();
  const std::string shape = shape_text(layout_);
  int count = 0;

  HEARSAY_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &count));
  const auto forward = ranking<cudnnConvolutionFwdAlgoPerf_t>(count, [&](int n, int* got, auto* perf) {
    return cudnnGetConvolutionForwardAlgorithm_v7(h, x, w, conv, y, n, got, perf);
  });
  std::tie(forward_algo_, forward_bytes_) = pick_algorithm(
      forward, limit,
      [&](auto algo, std::size_t* bytes) {
        return cudnnGetConvolutionForwardWorkspaceSize(h, x, w, conv, y, algo, bytes);
      },
      "forward", shape);

  HEARSAY_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &count));
  const auto data = ranking<cudnnConvolutionBwdDataAlgoPerf_t>(count, [&](int n, int* got, auto* perf) {
    return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, w, y, conv, x, n, got, perf);
  });
  std::tie(backward_data_algo_, backward_data_bytes_) = pick_algorithm(
      data, limit,
      [&](auto algo, std::size_t* bytes) {
        return cudnnGetConvolutionBackwardDataWorkspaceSize(h, w, y, conv, x, algo, bytes);
      },
      "backward-data", shape);

  HEARSAY_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &count));
  const auto filter = ranking<cudnnConvolutionBwdFilterAlgoPerf_t>(count, [&](int n, int* got, auto* perf) {
    return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, x, y, conv, w, n, got, perf);
  });
  std::tie(backward_filter_algo_, backward_filter_bytes_) = pick_algorithm(
      filter, limit,
      [&](auto algo, std::size_t* bytes) {
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, x, y, conv, w, algo, bytes);
      },
      "backward-filter", shape);
}

void* ConvPlan::scratch() {
  if (workspace_bytes_ == 0) return nullptr;
  // The workspace only grows, and this plan reserved its need when it was made.
  if (workspace_->bytes() < workspace_bytes_)
    throw std::logic_error("ConvPlan: workspace smaller than reserved");
  return workspace_->data();
}

void ConvPlan::forward(const float* x, const float* w, float* y) {
  require_pointers("forward", x, w, y);
  const float one = 1.0f, zero = 0.0f;  // y = 1 * conv + 0 * y: overwritten, not read
  HEARSAY_CUDNN_CHECK(cudnnConvolutionForward(handle_.get(), &one, x_desc_.get(), x, w_desc_.get(), w,
                                              conv_desc_.get(), forward_algo_, scratch(), forward_bytes_,
                                              &zero, y_desc_.get(), y));
}

void ConvPlan::backward_data(const float* dy, const float* w, float* dx) {
  require_pointers("backward_data", dy, w, dx);
  const float one = 1.0f, zero = 0.0f;
  HEARSAY_CUDNN_CHECK(cudnnConvolutionBackwardData(handle_.get(), &one, w_desc_.get(), w, y_desc_.get(), dy,
                                                   conv_desc_.get(), backward_data_algo_, scratch(),
                                                   backward_data_bytes_, &zero, x_desc_.get(), dx));
}

void ConvPlan::backward_filter(const float* x, const float* dy, float* dw) {
  require_pointers("backward_filter", x, dy, dw);
  const float one = 1.0f, zero = 0.0f;
  HEARSAY_CUDNN_CHECK(cudnnConvolutionBackwardFilter(handle_.get(), &one, x_desc_.get(), x, y_desc_.get(), dy,
                                                     conv_desc_.get(), backward_filter_algo_, scratch(),
                                                     backward_filter_bytes_, &zero, w_desc_.get(), dw));
}

std::string ConvPlan::describe() const {
  auto part = [](const char* what, const char* algo, std::size_t bytes) {
    return std::string(what) + " " + algo + " (" + std::to_string(bytes) + " B)";
  };
  return "conv " + shape_text(layout_) + ": " + part("forward", algo_name(forward_algo_), forward_bytes_) +
         ", " + part("backward data", algo_name(backward_data_algo_), backward_data_bytes_) + ", " +
         part("backward filter", algo_name(backward_filter_algo_), backward_filter_bytes_);
}

ConvPlan& ConvPlanCache::plan(const cpu::ConvGeometry& g, int batch, int out_channels) {
  const ConvPlanKey key = conv_plan_key(g, batch, out_channels);
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    auto made = std::make_unique<ConvPlan>(handle_, g, batch, out_channels, &workspace_, workspace_limit_);
    it = plans_.emplace(key, std::move(made)).first;
  }
  return *it->second;
}

}  // namespace hearsay::cuda
