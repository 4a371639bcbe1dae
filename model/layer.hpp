// The layer interface. A layer owns no parameter storage: the Model binds it to its
// slice of the flat state (trainable parameters first, then every layer's buffers), and
// backward writes its gradient into the same parameter slice of whichever flat gradient
// buffer the caller passes (one per compute thread).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "base/rng.hpp"
#include "model/op.hpp"
#include "model/tensor.hpp"

namespace hearsay {

// One named parameter tensor of a layer, e.g. {"weight", [out, in]}: the layer's slice of
// the flat buffer holds its tensors back to back in the order listed, each row-major.
struct ParamTensor {
  std::string suffix;  // "weight" or "bias", as in a PyTorch state_dict
  Shape shape;
};

// A non-trainable state tensor of a layer, e.g. BatchNorm's {"running_mean", [C]}. It has
// no gradient and the optimizer never touches it, but it lives in the flat state after the
// parameters, so it travels (and is mixed) with them and is saved in checkpoints.
struct BufferTensor {
  std::string suffix;
  Shape shape;
  bool is_count = false;  // an integer counter (num_batches_tracked): int64 in a state_dict
};

// kaiming_normal_fan_out: std sqrt(2 / fan_out), torchvision's ResNet convolutions.
enum class Init { kaiming_uniform, kaiming_normal, kaiming_normal_fan_out, xavier_uniform, xavier_normal };

// What a forward pass is for. Only BatchNorm tells them apart: `train` normalises with
// the batch's statistics and updates the running ones; `train_replica` normalises with the
// batch's statistics but leaves the running ones alone (the second and later compute
// threads of a split batch: torch.nn.DataParallel keeps its first replica's, too); `eval`
// normalises with the running statistics.
enum class Pass { train, train_replica, eval };

class Layer {
 public:
  virtual ~Layer() = default;
  // Which op runs this layer: every backend dispatches on it (and the CUDA runner then
  // knows the layer's class), so no backend keeps a list of layer classes.
  virtual Op op() const = 0;
  // Architecture text, e.g. "conv2d(1,20,k3,s1,p0)"; it goes into the model fingerprint.
  virtual std::string describe() const = 0;
  // Shapes include the batch dimension.
  virtual Shape output_shape(const Shape& input) const = 0;
  virtual std::int64_t param_count() const { return 0; }
  // The layer's parameters as PyTorch would name and shape them, in buffer order; the
  // element counts add up to param_count(). Checkpoints write them as named tensors.
  virtual std::vector<ParamTensor> param_tensors() const { return {}; }
  virtual void init_params(Rng& /*rng*/) {}
  // Floats of non-trainable state, laid out as buffer_tensors() lists them; init_buffers
  // sets their starting values (BatchNorm: mean 0, variance 1, count 0).
  virtual std::int64_t buffer_count() const { return 0; }
  virtual std::vector<BufferTensor> buffer_tensors() const { return {}; }
  virtual void init_buffers() {}
  // Floats of scratch memory the layer needs for an input of this shape (batch
  // included: the largest batch the caller will run). The region is the layer's own:
  // what forward leaves there is still there when backward runs on the same batch.
  virtual std::int64_t scratch_floats(const Shape& /*input*/) const { return 0; }
  // Linear and Conv2d can apply a following ReLU in their own epilogue.
  virtual bool can_fuse_relu() const { return false; }

  // Writes y. BatchNorm in a training pass also updates its running statistics, which
  // live in the model's state, not in the layer object.
  virtual void forward(ConstTensorView x, TensorView y, float* scratch, Pass pass) const = 0;
  // dy may be overwritten (it is the caller's workspace). dx is null when the input
  // gradient is not needed (first layer). grads is the base of a flat gradient buffer;
  // the layer overwrites its own slice [param_offset, param_offset + param_count).
  virtual void backward(ConstTensorView x, ConstTensorView y, TensorView dy, float* dx, float* grads,
                        float* scratch) const = 0;

  // state: the base of the flat state; the layer's parameters start at param_offset and
  // its buffers at buffer_offset. A layer made of layers binds its parts after it.
  virtual void bind(float* state, std::int64_t param_offset, std::int64_t buffer_offset) {
    params_ = state;
    offset_ = param_offset;
    buffer_offset_ = buffer_offset;
  }
  void bind(float* params, std::int64_t offset) { bind(params, offset, 0); }
  std::int64_t param_offset() const { return offset_; }
  std::int64_t buffer_offset() const { return buffer_offset_; }
  void set_fused_relu(bool on) { fused_relu_ = on; }
  bool fused_relu() const { return fused_relu_; }
  // A fused ReLU's backward mask (dy *= y > 0) can be applied by the next layer while
  // it writes dy (see AvgPool2d), saving a pass over the activations.
  void set_relu_mask_by_consumer(bool on) { relu_mask_by_consumer_ = on; }
  // Whether backward must still apply the fused ReLU's mask to dy itself (every backend
  // runs the same plan of fusions).
  bool masks_own_relu() const { return fused_relu_ && !relu_mask_by_consumer_; }

 protected:
  float* weights() const { return params_ + offset_; }
  float* buffers() const { return params_ + buffer_offset_; }

  bool fused_relu_ = false;
  bool relu_mask_by_consumer_ = false;

 private:
  float* params_ = nullptr;
  std::int64_t offset_ = 0;
  std::int64_t buffer_offset_ = 0;
};

// Fills w[0..n) for a layer with the given fan-in/fan-out. Kaiming uses the ReLU gain.
void init_weights(Init scheme, float* w, std::int64_t n, std::int64_t fan_in, std::int64_t fan_out, Rng& rng);
const char* init_name(Init scheme);

}  // namespace hearsay
