// The CUDA training session: the model's state (parameters, then BatchNorm's running
// statistics), gradients and optimizer state on the GPU, the peer's shard and the test set
// uploaded once, batches gathered on the device from index lists, and only the batch's loss
// and correct count coming back per step. The gradient and the optimizer cover the
// parameters, the state's prefix; the mixer's store the whole state or the parameters
// (SessionOptions::mix_buffers).
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>
#include <stdexcept>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/gather.hpp"
#include "kernels/cuda/optim.hpp"
#include "kernels/cuda/softmax_xent.hpp"
#include "model/cuda/cuda_backend.hpp"
#include "model/cuda/cuda_model_runner.hpp"
#include "model/cuda/cuda_parameter_store.hpp"

namespace hearsay {

namespace {

// Sets the device for the constructing thread before any member allocates on it.
int selected(const Backend& backend) {
  HEARSAY_CUDA_CHECK(cudaSetDevice(backend.device().index));
  return backend.device().index;
}

struct DeviceDataset {
  cuda::DeviceBuffer<float> images;
  cuda::DeviceBuffer<std::uint8_t> labels;
  std::int64_t count = 0;
};

DeviceDataset upload(const Dataset& d) {
  DeviceDataset out;
  out.count = d.count;
  out.images = cuda::DeviceBuffer<float>(d.images.size());
  out.images.copy_from_host(d.images);
  out.labels = cuda::DeviceBuffer<std::uint8_t>(d.labels.size());
  out.labels.copy_from_host(d.labels);
  return out;
}

class CudaTrainingSession final : public TrainingSession {
 public:
  CudaTrainingSession(std::shared_ptr<Backend> backend, Model& model, Optimizer& optimizer,
                      const SessionOptions& o)
      : backend_(std::move(backend)),
        index_(selected(*backend_)),
        model_(model),
        optimizer_(optimizer),
        options_(optimizer.options()),
        runner_(model, o.max_batch, stream_),
        params_(static_cast<std::size_t>(model.state_count())),
        grads_(static_cast<std::size_t>(model.param_count())),
        state_(optimizer.state().size()),
        batch_indices_(static_cast<std::size_t>(o.max_batch)),
        batch_x_(static_cast<std::size_t>(o.max_batch * model.input_floats())),
        batch_y_(static_cast<std::size_t>(o.max_batch)),
        xent_scratch_(cuda::softmax_xent_scratch_floats(o.max_batch)),
        sums_(1),
        store_(index_, params_.data(),
               static_cast<std::size_t>(o.mix_buffers ? model.state_count() : model.param_count()), stream_) {
    params_from_host();
    optimizer_state_from_host();
  }

  const Backend& backend() const override { return *backend_; }

  void bind_data(const Dataset& train, const Dataset& test) override {
    if (train.pixels() != model_.input_floats() || (test.count > 0 && test.pixels() != model_.input_floats()))
      throw std::invalid_argument("data images have " + std::to_string(train.pixels()) + " pixels, model '" +
                                  model_.name() + "' expects " + std::to_string(model_.input_floats()));
    select();
    train_ = upload(train);
    test_ = upload(test);
  }

  BatchStats compute_gradients(std::span<const std::int64_t> indices) override {
    const auto n = static_cast<std::int64_t>(indices.size());
    if (n < 1 || n > runner_.max_batch())
      throw std::invalid_argument("TrainingSession: batch of " + std::to_string(n) + " outside [1, " +
                                  std::to_string(runner_.max_batch()) + "]");
    select();
    HEARSAY_CUDA_CHECK(cudaMemcpyAsync(batch_indices_.data(), indices.data(), indices.size_bytes(),
                                       cudaMemcpyHostToDevice, stream_));
    const long pixels = static_cast<long>(model_.input_floats());
    cuda::gather_rows(n, pixels, train_.images.data(), batch_indices_.data(), batch_x_.data(), stream_);
    cuda::gather_labels(n, train_.labels.data(), batch_indices_.data(), batch_y_.data(), stream_);
    HEARSAY_CUDA_CHECK(cudaMemsetAsync(sums_.data(), 0, sizeof(cuda::XentSums), stream_));
    const float* logits = runner_.forward(params_.data(), batch_x_.data(), n, Pass::train);
    cuda::softmax_xent(n, model_.classes(), logits, batch_y_.data(), 1.0f / static_cast<float>(n),
                       runner_.logits_grad(), xent_scratch_.data(), sums_.data(), stream_);
    runner_.backward(params_.data(), grads_.data());
    return read_sums(n);
  }

  void apply_update(float lr) override {
    if (!(lr >= 0.0f && std::isfinite(lr)))
      throw std::invalid_argument(optimizer_.name() + ": learning rate must be finite and >= 0");
    select();
    const auto n = grads_.size();  // the parameters: the state's prefix
    if (options_.kind == OptimizerOptions::Kind::sgd) {
      const SgdOptions& s = options_.sgd;
      cuda::sgd_update(n, params_.data(), grads_.data(), state_.empty() ? nullptr : state_.data(), lr,
                       s.momentum, s.dampening, s.weight_decay, s.nesterov, steps_ == 0, stream_);
    } else {
      const AdamWOptions& a = options_.adamw;
      cuda::adamw_update(n, params_.data(), grads_.data(), state_.data(), state_.data() + n, lr, a.beta1,
                         a.beta2, a.eps, a.weight_decay, steps_ + 1, stream_);
    }
    ++steps_;
  }

  BatchStats evaluate() override {
    select();
    HEARSAY_CUDA_CHECK(cudaMemsetAsync(sums_.data(), 0, sizeof(cuda::XentSums), stream_));
    const std::int64_t chunk = runner_.max_batch();
    const long pixels = static_cast<long>(model_.input_floats());
    for (std::int64_t at = 0; at < test_.count; at += chunk) {
      const std::int64_t n = std::min(chunk, test_.count - at);
      const float* logits = runner_.forward(params_.data(), test_.images.data() + at * pixels, n, Pass::eval);
      cuda::softmax_xent(n, model_.classes(), logits, test_.labels.data() + at, 0.0f, nullptr,
                         xent_scratch_.data(), sums_.data(), stream_);
    }
    return read_sums(test_.count);
  }

  ParameterStore& parameters() override { return store_; }

  void params_to_host() override {
    select();
    copy_to_host(params_.data(), model_.state());
  }
  void params_from_host() override {
    select();
    params_.copy_from_host(model_.state());
  }
  void optimizer_state_to_host() override {
    select();
    copy_to_host(state_.data(), optimizer_.state());
    optimizer_.set_steps_taken(steps_);
  }
  void optimizer_state_from_host() override {
    select();
    state_.copy_from_host(optimizer_.state());
    steps_ = optimizer_.steps_taken();
  }

 private:
  void select() const { HEARSAY_CUDA_CHECK(cudaSetDevice(index_)); }

  // Waits for the stream, then copies: the work queued on it wrote what is copied.
  void copy_to_host(const float* src, std::span<float> dst) {
    if (dst.empty()) return;
    HEARSAY_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src, dst.size_bytes(), cudaMemcpyDeviceToHost, stream_));
    stream_.synchronize();
  }

  BatchStats read_sums(std::int64_t count) {
    cuda::XentSums sums{};
    HEARSAY_CUDA_CHECK(cudaMemcpyAsync(&sums, sums_.data(), sizeof sums, cudaMemcpyDeviceToHost, stream_));
    stream_.synchronize();
    return BatchStats{sums.loss_sum, static_cast<std::int64_t>(sums.correct), count};
  }

  std::shared_ptr<Backend> backend_;
  int index_;
  Model& model_;
  Optimizer& optimizer_;
  OptimizerOptions options_;
  cuda::Stream stream_;
  CudaModelRunner runner_;
  // params_: the model's whole state (params_.size() == state_count); grads_: param_count.
  cuda::DeviceBuffer<float> params_, grads_, state_;
  cuda::DeviceBuffer<std::int64_t> batch_indices_;
  cuda::DeviceBuffer<float> batch_x_;
  cuda::DeviceBuffer<std::uint8_t> batch_y_;
  cuda::DeviceBuffer<float> xent_scratch_;
  cuda::DeviceBuffer<cuda::XentSums> sums_;
  DeviceDataset train_, test_;
  CudaParameterStore store_;
  std::int64_t steps_ = 0;
};

}  // namespace

std::unique_ptr<TrainingSession> make_cuda_session(std::shared_ptr<Backend> backend, Model& model,
                                                   Optimizer& optimizer, const SessionOptions& options) {
  return std::make_unique<CudaTrainingSession>(std::move(backend), model, optimizer, options);
}

}  // namespace hearsay
