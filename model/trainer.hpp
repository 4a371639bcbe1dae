// Computes the mean gradient of a model over a batch with T compute threads.
//
// The batch is split into T contiguous chunks; thread t runs forward and backward on
// chunk t in its own Workspace and gradient buffer, then the buffers are summed in the
// fixed order 0..T-1. The result depends on T but never on timing, so the same seed
// and thread count give a bit-identical run. BatchNorm normalises each chunk with its own
// statistics (the per-replica statistics of torch.nn.DataParallel).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "base/thread_pool.hpp"
#include "model/model.hpp"

namespace hearsay {

struct BatchStats {
  double loss_sum = 0;
  std::int64_t correct = 0;
  std::int64_t count = 0;
  double mean_loss() const { return count ? loss_sum / static_cast<double>(count) : 0.0; }
  double accuracy() const { return count ? static_cast<double>(correct) / static_cast<double>(count) : 0.0; }
  BatchStats& operator+=(const BatchStats& o) {
    loss_sum += o.loss_sum;
    correct += o.correct;
    count += o.count;
    return *this;
  }
};

class Trainer {
 public:
  Trainer(Model& model, int threads, std::int64_t max_batch);
  int threads() const { return pool_.size(); }
  Model& model() { return model_; }

  // x: [batch x model.input_floats()], labels < model.classes(). Leaves the gradient of
  // the mean loss in model.grads().
  BatchStats compute_gradients(const float* x, const std::uint8_t* labels, std::int64_t batch);
  // Loss and accuracy over count examples, in chunks of max_batch, no gradients.
  BatchStats evaluate(const float* x, const std::uint8_t* labels, std::int64_t count);

 private:
  Model& model_;
  std::int64_t max_batch_;
  ThreadPool pool_;
  std::vector<std::unique_ptr<Workspace>> workspaces_;
  std::vector<FlatBuffer> thread_grads_;  // one per thread when T > 1 (T == 1 writes model.grads())
};

}  // namespace hearsay
