// Optimizers over a model's flat parameter buffer and its flat gradient buffer (see
// model/model.hpp): one fused kernel call per step, whatever the number of layers. The state
// (momentum, Adam moments) is itself one flat vector so checkpoints can save it verbatim.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "model/optim/schedule.hpp"

namespace hearsay {

struct SgdOptions {
  float momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};

struct AdamWOptions {
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.01f;
};

// Which update an optimizer runs and with what settings: a device backend runs the same
// update on its own copy of the state.
struct OptimizerOptions {
  enum class Kind { sgd, adamw };
  Kind kind = Kind::sgd;
  SgdOptions sgd;
  AdamWOptions adamw;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string name() const = 0;
  virtual OptimizerOptions options() const = 0;
  // One update with learning rate lr (>= 0, finite; the schedule's value for this step).
  // params and grads must both have the size given at construction: std::invalid_argument
  // otherwise.
  virtual void step(std::span<float> params, std::span<const float> grads, float lr) = 0;
  // The whole state as one flat vector (SGD with momentum: the buffer, n floats; AdamW: m
  // then v, 2n floats; plain SGD: empty). Writable so a checkpoint can restore it; restore
  // steps_taken with it, since the first step and AdamW's bias correction depend on it.
  virtual std::span<float> state() = 0;
  virtual std::int64_t steps_taken() const = 0;
  // std::invalid_argument when negative.
  virtual void set_steps_taken(std::int64_t steps) = 0;
};

// torch.optim.SGD semantics. Validated like PyTorch: negative (or NaN) momentum,
// dampening or weight decay and Nesterov without momentum > 0 and dampening == 0 throw
// std::invalid_argument.
std::unique_ptr<Optimizer> make_sgd(std::size_t n, SgdOptions options);
// torch.optim.AdamW semantics. betas in [0, 1), eps > 0, weight_decay >= 0, else
// std::invalid_argument.
std::unique_ptr<Optimizer> make_adamw(std::size_t n, AdamWOptions options);

}  // namespace hearsay
