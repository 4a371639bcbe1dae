#include "model/training_session.hpp"

#include <stdexcept>
#include <vector>

#ifdef HEARSAY_WITH_CUDA
#include "model/cuda/cuda_backend.hpp"
#endif

namespace hearsay {

namespace {

// The CPU session: the multi-threaded Trainer on the model's own host buffers, batches
// gathered into host memory, the optimizer working on its own state.
class CpuTrainingSession final : public TrainingSession {
 public:
  CpuTrainingSession(std::shared_ptr<Backend> backend, Model& model, Optimizer& optimizer,
                     const SessionOptions& o)
      : backend_(std::move(backend)),
        model_(model),
        optimizer_(optimizer),
        trainer_(model, o.threads, o.max_batch),
        batch_x_(static_cast<std::size_t>(o.max_batch * model.input_floats())),
        batch_y_(static_cast<std::size_t>(o.max_batch)),
        store_(o.mix_buffers ? model.state() : model.params()) {}

  const Backend& backend() const override { return *backend_; }

  void bind_data(const Dataset& train, const Dataset& test) override {
    if (train.pixels() != model_.input_floats() || (test.count > 0 && test.pixels() != model_.input_floats()))
      throw std::invalid_argument("data images have " + std::to_string(train.pixels()) + " pixels, model '" +
                                  model_.name() + "' expects " + std::to_string(model_.input_floats()));
    train_ = &train;
    test_ = &test;
  }

  BatchStats compute_gradients(std::span<const std::int64_t> indices) override {
    if (train_ == nullptr) throw std::logic_error("TrainingSession: bind_data before compute_gradients");
    const auto n = static_cast<std::int64_t>(indices.size());
    if (n > static_cast<std::int64_t>(batch_y_.size()))
      throw std::invalid_argument("TrainingSession: batch of " + std::to_string(n) + " over the maximum " +
                                  std::to_string(batch_y_.size()));
    gather_batch(*train_, indices, batch_x_.data(), batch_y_.data());
    return trainer_.compute_gradients(batch_x_.data(), batch_y_.data(), n);
  }

  void apply_update(float lr) override { optimizer_.step(model_.params(), model_.grads(), lr); }

  BatchStats evaluate() override {
    if (test_ == nullptr) throw std::logic_error("TrainingSession: bind_data before evaluate");
    return trainer_.evaluate(test_->images.data(), test_->labels.data(), test_->count);
  }

  ParameterStore& parameters() override { return store_; }
  void params_to_host() override {}
  void params_from_host() override {}
  void optimizer_state_to_host() override {}
  void optimizer_state_from_host() override {}

 private:
  std::shared_ptr<Backend> backend_;
  Model& model_;
  Optimizer& optimizer_;
  Trainer trainer_;
  std::vector<float> batch_x_;
  std::vector<std::uint8_t> batch_y_;
  const Dataset* train_ = nullptr;
  const Dataset* test_ = nullptr;
  HostParameterStore store_;
};

}  // namespace

std::unique_ptr<TrainingSession> make_training_session(const Device& device, Model& model,
                                                       Optimizer& optimizer, const SessionOptions& options) {
  if (options.max_batch < 1) throw std::invalid_argument("TrainingSession: batch size must be >= 1");
  std::shared_ptr<Backend> backend = make_backend(device, options.threads);
  if (auto why = unsupported(*backend, model))
    throw std::invalid_argument("model " + model.name() + ": " + *why);
#ifdef HEARSAY_WITH_CUDA
  if (device.is_cuda()) return make_cuda_session(std::move(backend), model, optimizer, options);
#endif
  return std::make_unique<CpuTrainingSession>(std::move(backend), model, optimizer, options);
}

}  // namespace hearsay
