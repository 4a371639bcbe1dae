// Learning-rate schedules: a pure function of the 0-based step, so a peer resumed from a
// checkpoint (or a peer that rejoins) computes the same rate as one that never stopped.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

namespace hearsay {

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  // Learning rate for the 0-based step; std::invalid_argument for a negative step.
  virtual float at(std::int64_t step) const = 0;
  // One line for logs, e.g. "step(lr=0.1, step_size=30, gamma=0.1)".
  virtual std::string describe() const = 0;
};

// All factories throw std::invalid_argument on bad arguments: lr must be finite and >= 0.
std::unique_ptr<LrSchedule> make_constant_lr(float lr);
// lr * gamma^(step / step_size) with integer division; step_size > 0, gamma > 0.
std::unique_ptr<LrSchedule> make_step_lr(float lr, std::int64_t step_size, float gamma);
// Linear warm-up lr*(s+1)/warmup_steps for s < warmup_steps (reaching lr on the last
// warm-up step), then cosine from lr at s = warmup_steps down to min_lr at s =
// total_steps, and min_lr after. 0 <= warmup_steps <= total_steps, 0 <= min_lr <= lr.
std::unique_ptr<LrSchedule> make_warmup_cosine_lr(float lr, std::int64_t warmup_steps,
                                                  std::int64_t total_steps, float min_lr = 0);

// Parses the --lr-schedule flag: "constant", "step:STEP_SIZE:GAMMA", "cosine" or
// "cosine:WARMUP" (warm-up steps, default 0; cosine decays to 0 at total_steps). WARMUP
// is a step count or a percentage of total_steps ("cosine:10%", rounded to a step).
// std::invalid_argument, with a message listing these forms, on bad text or values.
std::unique_ptr<LrSchedule> parse_lr_schedule(const std::string& text, float lr, std::int64_t total_steps);

}  // namespace hearsay
