// The layer interface. A layer owns no parameter storage: the Model binds it to its
// slice of the flat parameter buffer, and backward writes its gradient into the same
// slice of whichever flat gradient buffer the caller passes (one per compute thread).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "base/rng.hpp"
#include "model/tensor.hpp"

namespace hearsay {

// One named parameter tensor of a layer, e.g. {"weight", [out, in]}: the layer's slice of
// the flat buffer holds its tensors back to back in the order listed, each row-major.
struct ParamTensor {
  std::string suffix;  // "weight" or "bias", as in a PyTorch state_dict
  Shape shape;
};

enum class Init { kaiming_uniform, kaiming_normal, xavier_uniform, xavier_normal };

class Layer {
 public:
  virtual ~Layer() = default;
  // Architecture text, e.g. "conv2d(1,20,k3,s1,p0)"; it goes into the model fingerprint.
  virtual std::string describe() const = 0;
  // Shapes include the batch dimension.
  virtual Shape output_shape(const Shape& input) const = 0;
  virtual std::int64_t param_count() const { return 0; }
  // The layer's parameters as PyTorch would name and shape them, in buffer order; the
  // element counts add up to param_count(). Checkpoints write them as named tensors.
  virtual std::vector<ParamTensor> param_tensors() const { return {}; }
  virtual void init_params(Rng& /*rng*/) {}
  // Floats of scratch memory the layer needs for an input of this shape (batch
  // included: the largest batch the caller will run). The region is the layer's own:
  // what forward leaves there is still there when backward runs on the same batch.
  virtual std::int64_t scratch_floats(const Shape& /*input*/) const { return 0; }
  // Linear and Conv2d can apply a following ReLU in their own epilogue.
  virtual bool can_fuse_relu() const { return false; }

  virtual void forward(ConstTensorView x, TensorView y, float* scratch) const = 0;
  // dy may be overwritten (it is the caller's workspace). dx is null when the input
  // gradient is not needed (first layer). grads is the base of a flat gradient buffer;
  // the layer overwrites its own slice [param_offset, param_offset + param_count).
  virtual void backward(ConstTensorView x, ConstTensorView y, TensorView dy, float* dx, float* grads,
                        float* scratch) const = 0;

  void bind(float* params, std::int64_t offset) {
    params_ = params;
    offset_ = offset;
  }
  std::int64_t param_offset() const { return offset_; }
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

  bool fused_relu_ = false;
  bool relu_mask_by_consumer_ = false;

 private:
  float* params_ = nullptr;
  std::int64_t offset_ = 0;
};

// Fills w[0..n) for a layer with the given fan-in/fan-out. Kaiming uses the ReLU gain.
void init_weights(Init scheme, float* w, std::int64_t n, std::int64_t fan_in, std::int64_t fan_out, Rng& rng);
const char* init_name(Init scheme);

}  // namespace hearsay
