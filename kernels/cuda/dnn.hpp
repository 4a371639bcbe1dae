// cuDNN for the Conv2d layer: an RAII handle, the cuDNN status check, and convolution
// plans. A ConvPlan is made once per (batch, input geometry, output channels): it sets
// the descriptors from kernels/cuda/conv_layout.hpp (tested on the host against the CPU
// layer) and chooses its three algorithms once, so that every step of an epoch runs the
// same ones. ConvPlanCache hands a layer its plan per shape (the smaller last batch of an
// epoch gets a plan of its own) and shares one workspace among them.
//
// Precision: true fp32. The convolutions use CUDNN_FMA_MATH: with CUDNN_DEFAULT_MATH,
// cuDNN may run fp32 convolutions as TF32 on tensor cores (Ampere and later), whose
// 10-bit mantissa would miss the GPU tests' 1e-4 comparison with the CPU layers.
#pragma once
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "kernels/cpu/conv.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/conv_layout.hpp"
#include "kernels/cuda/device.hpp"

namespace hearsay::cuda {

// "CUDNN_STATUS_BAD_PARAM" (cuDNN's own text for the status). Needs no device.
std::string cudnn_status_text(cudnnStatus_t status);

inline void check_cudnn(cudnnStatus_t status, const char* call, const char* file, int line) {
  check_status("cuDNN", status, CUDNN_STATUS_SUCCESS, cudnn_status_text, call, file, line);
}

// Owns a cudnnHandle_t created on the current device, on the default stream until
// set_stream. Non-copyable, movable; the destructor never throws. Not thread-safe: one
// per thread or stream.
class DnnHandle {
 public:
  DnnHandle();
  ~DnnHandle() { destroy(); }
  DnnHandle(const DnnHandle&) = delete;
  DnnHandle& operator=(const DnnHandle&) = delete;
  DnnHandle(DnnHandle&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  DnnHandle& operator=(DnnHandle&& other) noexcept;

  void set_stream(cudaStream_t stream);
  cudaStream_t stream() const;
  cudnnHandle_t get() const noexcept { return handle_; }

 private:
  void destroy() noexcept;
  cudnnHandle_t handle_ = nullptr;
};

// Device scratch for cuDNN's algorithms, shared by the plans of one stream. It only
// grows; growing waits for `stream` first, since work queued there may still use the
// old buffer.
class ConvWorkspace {
 public:
  void reserve(std::size_t bytes, cudaStream_t stream);
  void* data() noexcept { return buffer_.data(); }
  std::size_t bytes() const noexcept { return buffer_.bytes(); }

 private:
  DeviceBuffer<unsigned char> buffer_;
};

namespace detail {
// unique_ptr owners of the descriptors; their deleters ignore the status (never throw).
struct TensorDescDeleter {
  void operator()(cudnnTensorDescriptor_t d) const noexcept { (void)cudnnDestroyTensorDescriptor(d); }
};
struct FilterDescDeleter {
  void operator()(cudnnFilterDescriptor_t d) const noexcept { (void)cudnnDestroyFilterDescriptor(d); }
};
struct ConvDescDeleter {
  void operator()(cudnnConvolutionDescriptor_t d) const noexcept {
    (void)cudnnDestroyConvolutionDescriptor(d);
  }
};
using TensorDesc = std::unique_ptr<std::remove_pointer_t<cudnnTensorDescriptor_t>, TensorDescDeleter>;
using FilterDesc = std::unique_ptr<std::remove_pointer_t<cudnnFilterDescriptor_t>, FilterDescDeleter>;
using ConvDesc = std::unique_ptr<std::remove_pointer_t<cudnnConvolutionDescriptor_t>, ConvDescDeleter>;
}  // namespace detail

// One convolution shape: x [batch x C x H x W] (NCHW, dense), w [K x C x R x S] (PyTorch
// OIHW), y [batch x K x OH x OW]; cross-correlation, zero padding, dilation 1, as the CPU
// Conv2d. All methods overwrite their output and are asynchronous on the handle's current
// stream; the plan must not outlive the handle (nor the workspace it was given).
class ConvPlan {
 public:
  // Algorithms needing more scratch than this are passed over.
  static constexpr std::size_t kDefaultWorkspaceLimit = std::size_t{256} << 20;

  // Sets the descriptors and chooses the algorithms (cuDNN's heuristics, see dnn.cpp).
  // `workspace`: shared scratch, reserved here to this plan's need; null: the plan owns
  // its own. Throws std::invalid_argument for bad sizes (conv_descriptors), CudaError
  // for cuDNN failures, std::runtime_error when no algorithm fits the workspace limit.
  ConvPlan(DnnHandle& handle, const cpu::ConvGeometry& g, int batch, int out_channels,
           ConvWorkspace* workspace = nullptr, std::size_t workspace_limit = kDefaultWorkspaceLimit);
  // Not movable: a plan may point at its own workspace, and caches hand out references.
  ConvPlan(const ConvPlan&) = delete;
  ConvPlan& operator=(const ConvPlan&) = delete;

  void forward(const float* x, const float* w, float* y);            // y = conv(x, w), no bias
  void backward_data(const float* dy, const float* w, float* dx);    // dx = conv^T(dy, w)
  void backward_filter(const float* x, const float* dy, float* dw);  // dw = sum over the batch

  // The largest of the three algorithms' scratch needs.
  std::size_t workspace_bytes() const noexcept { return workspace_bytes_; }
  const ConvDescriptors& layout() const noexcept { return layout_; }
  // The shape and the algorithms chosen, for logs: "conv 8x1x28x28 * 20x1x3x3 s1 p0 ->
  // 8x20x26x26: forward IMPLICIT_PRECOMP_GEMM (0 B), ...".
  std::string describe() const;

 private:
  void set_descriptors();
  void choose_algorithms(std::size_t limit);
  void* scratch();

  DnnHandle& handle_;
  ConvDescriptors layout_;
  detail::TensorDesc x_desc_, y_desc_;
  detail::FilterDesc w_desc_;
  detail::ConvDesc conv_desc_;
  cudnnConvolutionFwdAlgo_t forward_algo_{};
  cudnnConvolutionBwdDataAlgo_t backward_data_algo_{};
  cudnnConvolutionBwdFilterAlgo_t backward_filter_algo_{};
  std::size_t forward_bytes_ = 0, backward_data_bytes_ = 0, backward_filter_bytes_ = 0;
  std::size_t workspace_bytes_ = 0;
  ConvWorkspace own_workspace_;
  ConvWorkspace* workspace_;
};

// The plans of one handle, one per (batch, geometry, output channels), made on first use
// and kept; all share one workspace grown to the largest need. References stay valid for
// the cache's lifetime. Like the handle, not thread-safe.
class ConvPlanCache {
 public:
  explicit ConvPlanCache(DnnHandle& handle, std::size_t workspace_limit = ConvPlan::kDefaultWorkspaceLimit)
      : handle_(handle), workspace_limit_(workspace_limit) {}
  ConvPlanCache(const ConvPlanCache&) = delete;
  ConvPlanCache& operator=(const ConvPlanCache&) = delete;

  ConvPlan& plan(const cpu::ConvGeometry& g, int batch, int out_channels);
  std::size_t size() const noexcept { return plans_.size(); }
  std::size_t workspace_bytes() const noexcept { return workspace_.bytes(); }

 private:
  DnnHandle& handle_;
  std::size_t workspace_limit_;
  // Declared before the plans, so destroyed after them.
  ConvWorkspace workspace_;
  std::map<ConvPlanKey, std::unique_ptr<ConvPlan>> plans_;
};

}  // namespace hearsay::cuda

#define HEARSAY_CUDNN_CHECK(call) ::hearsay::cuda::check_cudnn((call), #call, __FILE__, __LINE__)
