#include "model/optim/optimizer.hpp"

#include <cmath>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/optim.hpp"

namespace hearsay {
namespace {

// Finite and >= 0; phrased positively so that NaN fails (a plain x < 0 check lets it pass).
bool non_negative(float x) { return x >= 0.0f && std::isfinite(x); }

// Shared bookkeeping: buffer size, step counter, argument checks.
class FlatOptimizer : public Optimizer {
 public:
  FlatOptimizer(std::size_t n, std::size_t state_size) : n_(n), state_(state_size, 0.0f) {}

  std::span<float> state() override { return state_; }
  std::int64_t steps_taken() const override { return steps_; }
  void set_steps_taken(std::int64_t steps) override {
    if (steps < 0) throw std::invalid_argument(name() + ": steps_taken must be >= 0");
    steps_ = steps;
  }

  void step(std::span<float> params, std::span<const float> grads, float lr) override {
    if (params.size() != n_ || grads.size() != n_) {
      throw std::invalid_argument(name() + ": expected " + std::to_string(n_) +
                                  " parameters and gradients, got " + std::to_string(params.size()) +
                                  " and " + std::to_string(grads.size()));
    }
    if (!non_negative(lr)) throw std::invalid_argument(name() + ": learning rate must be finite and >= 0");
    update(params.data(), grads.data(), lr);
    ++steps_;
  }

 protected:
  // steps_ still counts the steps before this one when update runs.
  virtual void update(float* params, const float* grads, float lr) = 0;

  std::size_t n_;
  std::vector<float> state_;
  std::int64_t steps_ = 0;
};

class Sgd final : public FlatOptimizer {
 public:
  Sgd(std::size_t n, SgdOptions o) : FlatOptimizer(n, o.momentum != 0.0f ? n : 0), o_(o) {}
  std::string name() const override { return o_.nesterov ? "sgd(nesterov)" : "sgd"; }
  OptimizerOptions options() const override {
    OptimizerOptions o;
    o.sgd = o_;
    return o;
  }

 private:
  void update(float* params, const float* grads, float lr) override {
    // The buffer is (re)started from g when no step has been taken, as PyTorch does when
    // its momentum_buffer is None; a restored checkpoint sets steps_ and keeps the buffer.
    cpu::sgd_update(n_, params, grads, state_.empty() ? nullptr : state_.data(), lr, o_.momentum,
                    o_.dampening, o_.weight_decay, o_.nesterov, steps_ == 0);
  }
  SgdOptions o_;
};

class AdamW final : public FlatOptimizer {
 public:
  AdamW(std::size_t n, AdamWOptions o) : FlatOptimizer(n, 2 * n), o_(o) {}
  std::string name() const override { return "adamw"; }
  OptimizerOptions options() const override {
    OptimizerOptions o;
    o.kind = OptimizerOptions::Kind::adamw;
    o.adamw = o_;
    return o;
  }

 private:
  void update(float* params, const float* grads, float lr) override {
    // state_ is m (first n) then v (second n).
    cpu::adamw_update(n_, params, grads, state_.data(), state_.data() + n_, lr, o_.beta1, o_.beta2, o_.eps,
                      o_.weight_decay, steps_ + 1);
  }
  AdamWOptions o_;
};

}  // namespace

std::unique_ptr<Optimizer> make_sgd(std::size_t n, SgdOptions o) {
  if (!non_negative(o.momentum)) throw std::invalid_argument("sgd: momentum must be finite and >= 0");
  if (!non_negative(o.dampening)) throw std::invalid_argument("sgd: dampening must be finite and >= 0");
  if (!non_negative(o.weight_decay)) throw std::invalid_argument("sgd: weight_decay must be finite and >= 0");
  if (o.nesterov && (o.momentum <= 0.0f || o.dampening != 0.0f)) {
    throw std::invalid_argument("sgd: Nesterov momentum requires momentum > 0 and dampening == 0");
  }
  return std::make_unique<Sgd>(n, o);
}

std::unique_ptr<Optimizer> make_adamw(std::size_t n, AdamWOptions o) {
  if (!(o.beta1 >= 0.0f && o.beta1 < 1.0f)) throw std::invalid_argument("adamw: beta1 must be in [0, 1)");
  if (!(o.beta2 >= 0.0f && o.beta2 < 1.0f)) throw std::invalid_argument("adamw: beta2 must be in [0, 1)");
  if (!(o.eps > 0.0f && std::isfinite(o.eps))) {
    throw std::invalid_argument("adamw: eps must be finite and > 0");
  }
  if (!non_negative(o.weight_decay)) {
    throw std::invalid_argument("adamw: weight_decay must be finite and >= 0");
  }
  return std::make_unique<AdamW>(n, o);
}

}  // namespace hearsay
