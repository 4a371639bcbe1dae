#include "model/model.hpp"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "base/rng.hpp"
#include "model/layers/pool2d.hpp"

namespace hearsay {

Model::Model(std::string name, Shape input_item, int classes, std::vector<std::unique_ptr<Layer>> layers,
             bool fuse)
    : name_(std::move(name)), input_item_(input_item), classes_(classes), layers_(std::move(layers)) {
  if (layers_.empty()) throw std::invalid_argument("Model: no layers");
  if (input_item_.rank() < 1 || input_item_.rank() > 3)
    throw std::invalid_argument("Model: input item must have 1 to 3 dimensions");
  // Validate the shapes once with a batch of 1 and lay out the state.
  Shape in = shape_after(-1, 1);
  std::int64_t buffers = 0;
  for (auto& layer : layers_) {
    in = layer->output_shape(in);
    item_shapes_.push_back(in);
    param_count_ += layer->param_count();
    buffers += layer->buffer_count();
  }
  if (in.rank() != 2 || in[1] != classes_)
    throw std::invalid_argument("Model: the last layer gives " + in.str() + ", expected [N," +
                                std::to_string(classes_) + "]");
  state_ = FlatBuffer(static_cast<std::size_t>(param_count_ + buffers));
  grads_ = FlatBuffer(static_cast<std::size_t>(param_count_));
  std::int64_t offset = 0, buffer_offset = param_count_;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    Layer& layer = *layers_[i];
    layer.bind(state_.data(), offset, buffer_offset);
    // The named tensors must tile the layer's slices exactly, or a checkpoint would save
    // the wrong floats under a name.
    std::int64_t tensor_offset = offset, buffer_tensor_offset = buffer_offset;
    for (auto& t : layer.param_tensors()) {
      named_params_.push_back({std::to_string(i) + "." + t.suffix, t.shape, tensor_offset});
      tensor_offset += t.shape.numel();
    }
    for (auto& t : layer.buffer_tensors()) {
      named_buffers_.push_back(
          {std::to_string(i) + "." + t.suffix, t.shape, buffer_tensor_offset, t.is_count});
      buffer_tensor_offset += t.shape.numel();
    }
    offset += layer.param_count();
    buffer_offset += layer.buffer_count();
    if (tensor_offset != offset || buffer_tensor_offset != buffer_offset)
      throw std::invalid_argument("Model: layer " + std::to_string(i) + " (" + layer.describe() +
                                  ")'s named tensors do not add up to its " +
                                  std::to_string(layer.param_count()) + " parameters and " +
                                  std::to_string(layer.buffer_count()) + " buffer floats");
  }
  for (auto& layer : layers_) layer->init_buffers();  // valid before init() or a checkpoint
  fused_away_.assign(layers_.size(), false);
  if (fuse) {
    for (std::size_t i = 0; i + 1 < layers_.size(); ++i) {
      if (layers_[i]->can_fuse_relu() && layers_[i + 1]->op() == Op::relu) {
        layers_[i]->set_fused_relu(true);
        fused_away_[i + 1] = true;
        // conv -> relu -> avgpool (LeNet): the pool's backward applies the ReLU mask.
        if (i + 2 < layers_.size() && layers_[i + 2]->op() == Op::avgpool2d) {
          static_cast<AvgPool2d&>(*layers_[i + 2]).set_mask_by_positive_input(true);
          layers_[i]->set_relu_mask_by_consumer(true);
        }
      }
    }
  }
}

std::string Model::architecture() const {
  std::string s = "in" + input_item_.str();
  for (const auto& layer : layers_) s += " " + layer->describe();
  return s + " -> " + std::to_string(classes_);
}

std::string Model::fingerprint() const {
  const std::uint64_t h = stable_hash(architecture());
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return name_ + "-" + std::to_string(param_count()) + "-" + hex;
}

double Model::train_flops_per_example() const {
  // Multiply-adds of the weight layers: 2 FLOPs each, times 3 for forward, input
  // gradient and weight gradient (the first layer's input gradient is not computed).
  double flops = 0;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const auto* layer = layers_[i].get();
    const std::int64_t weights = layer->param_count();
    if (weights == 0) continue;
    const Shape& out = item_shapes_[i];
    // Each output element costs (weights per output channel) multiply-adds.
    const std::int64_t channels = out[1];
    const std::int64_t pixels = out.per_item() / channels;
    const double macs = static_cast<double>(weights - channels) * static_cast<double>(pixels);
    flops += 2.0 * macs * (i == 0 ? 2.0 : 3.0);
  }
  return flops;
}

void Model::init(std::uint64_t seed) {
  Rng root(seed);
  for (auto& layer : layers_) {
    Rng rng = root.split();
    layer->init_params(rng);
    layer->init_buffers();
  }
}

std::int64_t Model::workspace_floats(std::int64_t n) const {
  std::int64_t floats = 0;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    if (!fused_away_[i]) floats += item_shapes_[i].numel() * n;
    floats += layers_[i]->scratch_floats(shape_after(static_cast<int>(i) - 1, n));
  }
  return floats;
}

Shape Model::shape_after(int i, std::int64_t n) const {
  if (i < 0) {
    switch (input_item_.rank()) {
      case 1:
        return Shape{n, input_item_[0]};
      case 2:
        return Shape{n, input_item_[0], input_item_[1]};
      default:
        return Shape{n, input_item_[0], input_item_[1], input_item_[2]};
    }
  }
  return item_shapes_.at(static_cast<std::size_t>(i)).with_batch(n);
}

Workspace::Workspace(const Model& model, std::int64_t max_batch) : model_(model), max_batch_(max_batch) {
  if (max_batch < 1) throw std::invalid_argument("Workspace: max_batch must be >= 1");
  const auto& layers = model.layers();
  std::int64_t widest = model.input_floats(), scratch = 0;
  scratch_offset_.resize(layers.size());
  outputs_.resize(layers.size());
  output_ptr_.resize(layers.size());
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const Shape out = model.shape_after(static_cast<int>(i), max_batch);
    widest = std::max(widest, out.numel());
    // Each layer has its own scratch region, kept from its forward to its backward.
    scratch_offset_[i] = scratch;
    const std::int64_t need =
        layers[i]->scratch_floats(model.shape_after(static_cast<int>(i) - 1, max_batch));
    scratch += (need + 15) / 16 * 16;  // keep every region 64-byte aligned
    if (model.is_fused_away(i)) {
      output_ptr_[i] = output_ptr_[i - 1];
    } else {
      outputs_[i] = FlatBuffer(static_cast<std::size_t>(out.numel()));
      output_ptr_[i] = outputs_[i].data();
    }
  }
  grad_a_ = FlatBuffer(static_cast<std::size_t>(widest));
  grad_b_ = FlatBuffer(static_cast<std::size_t>(widest));
  scratch_ = FlatBuffer(static_cast<std::size_t>(std::max<std::int64_t>(scratch, 1)));
}

ConstTensorView Workspace::forward(const float* x, std::int64_t batch, Pass pass) {
  if (batch > max_batch_ || batch < 0)
    throw std::invalid_argument("Workspace::forward: batch " + std::to_string(batch) + " outside [0, " +
                                std::to_string(max_batch_) + "]");
  batch_ = batch;
  input_ = x;
  const auto& layers = model_.layers();
  ConstTensorView in{x, model_.shape_after(-1, batch)};
  for (std::size_t i = 0; i < layers.size(); ++i) {
    TensorView out{output_ptr_[i], model_.shape_after(static_cast<int>(i), batch)};
    if (!model_.is_fused_away(i)) layers[i]->forward(in, out, scratch_.data() + scratch_offset_[i], pass);
    in = out;
  }
  return in;
}

TensorView Workspace::logits_buffer() { return TensorView{grad_a_.data(), Shape{batch_, model_.classes()}}; }

void Workspace::backward(float* dlogits, float* grads) {
  const auto& layers = model_.layers();
  float* dy = dlogits;
  float* spare[2] = {grad_a_.data(), grad_b_.data()};
  for (int i = static_cast<int>(layers.size()) - 1; i >= 0; --i) {
    const auto idx = static_cast<std::size_t>(i);
    if (model_.is_fused_away(idx)) continue;  // the producer applies the ReLU mask
    ConstTensorView x{i == 0 ? input_ : output_ptr_[idx - 1], model_.shape_after(i - 1, batch_)};
    ConstTensorView y{output_ptr_[idx], model_.shape_after(i, batch_)};
    // Pick a buffer for dx that is not the one holding dy.
    float* dx = nullptr;
    if (i > 0) dx = dy == spare[0] ? spare[1] : spare[0];
    layers[idx]->backward(x, y, TensorView{dy, y.shape}, dx, grads, scratch_.data() + scratch_offset_[idx]);
    dy = dx;
  }
}

}  // namespace hearsay
