// A sequential model over one flat state buffer and one flat gradient buffer.
//
// The state is the trainable parameters, then the buffers (BatchNorm's running
// statistics). Layers are bound to consecutive slices of each part in order (weight then
// bias, as in a PyTorch state_dict), so gossip, all-reduce, checkpoints and the
// optimizer all see one vector: the optimizer and the gradient cover the parameters,
// checkpoints and state transfers the whole state, and mixing either (--bn-stats). Activations live in a
// Workspace, one per compute thread; the parameters are shared read-only between workspaces during a step.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/flat_buffer.hpp"
#include "model/layer.hpp"

namespace hearsay {

// A tensor of a model's state: name as in a PyTorch nn.Sequential state_dict
// ("<layer index>.weight", "3.bn1.running_mean"), its shape, and where it starts in the
// flat state. is_count: an integer counter, int64 in a state_dict.
struct NamedTensor {
  std::string name;
  Shape shape;
  std::int64_t offset = 0;
  bool is_count = false;
};

class Model {
 public:
  // input_item: the shape of one example without the batch dimension, e.g. {1,28,28}.
  // fuse: let Linear/Conv2d apply a directly following ReLU in their epilogue.
  Model(std::string name, Shape input_item, int classes, std::vector<std::unique_ptr<Layer>> layers,
        bool fuse = true);

  const std::string& name() const { return name_; }
  int classes() const { return classes_; }
  const Shape& input_item() const { return input_item_; }
  std::int64_t input_floats() const { return input_item_.numel(); }
  // Trainable parameters (the optimizer's and the gradient's length).
  std::int64_t param_count() const { return param_count_; }
  // Floats of non-trainable buffers after them (0 without BatchNorm).
  std::int64_t buffer_count() const { return static_cast<std::int64_t>(state_.size()) - param_count_; }
  // The whole flat state: what checkpoints save and state transfers carry.
  std::int64_t state_count() const { return static_cast<std::int64_t>(state_.size()); }

  std::span<float> state() { return state_.span(); }
  std::span<const float> state() const { return state_.span(); }
  std::span<float> params() { return state().first(static_cast<std::size_t>(param_count_)); }
  std::span<const float> params() const { return state().first(static_cast<std::size_t>(param_count_)); }
  std::span<float> buffers() { return state().subspan(static_cast<std::size_t>(param_count_)); }
  std::span<float> grads() { return grads_.span(); }
  std::span<const float> grads() const { return grads_.span(); }

  // Every layer in order, e.g. "in[1,28,28] conv2d(1,20,k3,s1,p0) relu ... -> 10".
  std::string architecture() const;
  // "<name>-<param count>-<16 hex digits of a hash of architecture()>": peers refuse
  // to mix with a peer whose fingerprint differs.
  std::string fingerprint() const;
  // Training FLOPs per example (forward + both backward products), for benchmarks.
  double train_flops_per_example() const;

  // Every parameter tensor in buffer order; the tensors tile [0, param_count()) with no
  // gap. The layer index counts every layer of the list, parameterless ones included, so
  // "7.weight" of LeNet is the weight of layers()[7] as in torch.nn.Sequential.
  const std::vector<NamedTensor>& named_params() const { return named_params_; }
  // Every buffer tensor, in state order; they tile [param_count(), state_count()).
  const std::vector<NamedTensor>& named_buffers() const { return named_buffers_; }

  // Seeded initialisation: layer i draws from the i-th split of Rng(seed); the buffers
  // take their starting values.
  void init(std::uint64_t seed);

  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }
  // True when layer i is a ReLU that its producer applies (skipped at run time).
  bool is_fused_away(std::size_t i) const { return fused_away_[i]; }
  // Shape of layer i's output for a batch of n (i = -1: the input).
  Shape shape_after(int i, std::int64_t n) const;
  // Floats a Workspace for batches of n holds (activations and scratch; the two gradient
  // buffers aside), and what one more example adds to it: to size batches by memory.
  std::int64_t workspace_floats(std::int64_t n) const;
  std::int64_t workspace_floats_per_example() const {
    return (workspace_floats(64) - workspace_floats(32)) / 32;
  }

 private:
  std::string name_;
  Shape input_item_;
  int classes_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<bool> fused_away_;
  std::vector<Shape> item_shapes_;  // output shape of each layer for a batch of 1
  std::int64_t param_count_ = 0;
  FlatBuffer state_, grads_;
  std::vector<NamedTensor> named_params_, named_buffers_;
};

// Per-thread activations and scratch for batches up to max_batch.
class Workspace {
 public:
  Workspace(const Model& model, std::int64_t max_batch);
  std::int64_t max_batch() const { return max_batch_; }
  // Runs the model on x [batch x input_floats]; the returned logits stay valid until
  // the next call. batch must be <= max_batch. A training pass (Pass::train) updates
  // BatchNorm's running statistics in the model's state.
  ConstTensorView forward(const float* x, std::int64_t batch, Pass pass);
  // Back-propagates dlogits (overwritten) through the activations of the last forward
  // and writes the full parameter gradient into grads (size param_count).
  void backward(float* dlogits, float* grads);
  TensorView logits_buffer();

 private:
  const Model& model_;
  std::int64_t max_batch_, batch_ = 0;
  const float* input_ = nullptr;
  std::vector<FlatBuffer> outputs_;  // per layer; fused-away ReLUs share their producer's
  std::vector<float*> output_ptr_;
  FlatBuffer grad_a_, grad_b_, scratch_;
  std::vector<std::int64_t> scratch_offset_;  // per layer, into scratch_
};

}  // namespace hearsay
