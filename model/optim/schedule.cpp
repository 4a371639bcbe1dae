#include "model/optim/schedule.hpp"

#include <charconv>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string_view>
#include <vector>

namespace hearsay {
namespace {

void check_lr(const char* who, float lr) {
  if (!(lr >= 0.0f && std::isfinite(lr))) {
    throw std::invalid_argument(std::string(who) + ": learning rate must be finite and >= 0");
  }
}

void check_step(std::int64_t step) {
  if (step < 0) throw std::invalid_argument("LrSchedule::at: step must be >= 0");
}

// Shortest text that reads back as the same float, so describe() is exact but not noisy.
std::string fmt(float x) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(x);
}

class ConstantLr final : public LrSchedule {
 public:
  explicit ConstantLr(float lr) : lr_(lr) {}
  float at(std::int64_t step) const override {
    check_step(step);
    return lr_;
  }
  std::string describe() const override { return "constant(lr=" + fmt(lr_) + ")"; }

 private:
  float lr_;
};

class StepLr final : public LrSchedule {
 public:
  StepLr(float lr, std::int64_t step_size, float gamma) : lr_(lr), step_size_(step_size), gamma_(gamma) {}
  float at(std::int64_t step) const override {
    check_step(step);
    // In double so that many decays do not accumulate fp32 rounding.
    const double decays = static_cast<double>(step / step_size_);
    return static_cast<float>(lr_ * std::pow(static_cast<double>(gamma_), decays));
  }
  std::string describe() const override {
    return "step(lr=" + fmt(lr_) + ", step_size=" + std::to_string(step_size_) + ", gamma=" + fmt(gamma_) +
           ")";
  }

 private:
  float lr_;
  std::int64_t step_size_;
  float gamma_;
};

class WarmupCosineLr final : public LrSchedule {
 public:
  WarmupCosineLr(float lr, std::int64_t warmup, std::int64_t total, float min_lr)
      : lr_(lr), warmup_(warmup), total_(total), min_lr_(min_lr) {}
  float at(std::int64_t step) const override {
    check_step(step);
    if (step < warmup_) {
      return static_cast<float>(static_cast<double>(lr_) * static_cast<double>(step + 1) / warmup_);
    }
    if (step >= total_) return min_lr_;  // also covers total == warmup (no cosine phase)
    const double progress = static_cast<double>(step - warmup_) / static_cast<double>(total_ - warmup_);
    const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
    return static_cast<float>(min_lr_ + (static_cast<double>(lr_) - min_lr_) * cosine);
  }
  std::string describe() const override {
    return "cosine(lr=" + fmt(lr_) + ", warmup=" + std::to_string(warmup_) +
           ", total=" + std::to_string(total_) + ", min_lr=" + fmt(min_lr_) + ")";
  }

 private:
  float lr_;
  std::int64_t warmup_, total_;
  float min_lr_;
};

constexpr const char* kForms =
    "expected one of: constant, step:STEP_SIZE:GAMMA, cosine, cosine:WARMUP_STEPS, cosine:WARMUP_PERCENT%";

[[noreturn]] void bad_schedule(const std::string& text, const std::string& why) {
  throw std::invalid_argument("--lr-schedule '" + text + "': " + why + "; " + kForms);
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  for (std::size_t start = 0;;) {
    const std::size_t end = s.find(sep, start);
    parts.push_back(s.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) return parts;
    start = end + 1;
  }
}

// from_chars on the whole field: rejects empty text, signs like "+3", and trailing junk.
template <typename T>
bool parse_whole(std::string_view s, T& out) {
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size();
}

// The warm-up of "cosine:WARMUP": a step count, or "P%" of the run's steps (rounded), so
// that one setting fits runs of any length.
std::int64_t parse_warmup(const std::string& text, std::string_view field, std::int64_t total_steps) {
  if (field.ends_with('%')) {
    double percent = 0;
    if (!parse_whole(field.substr(0, field.size() - 1), percent) || !(percent >= 0 && percent <= 100))
      bad_schedule(text, "WARMUP_PERCENT is not a number from 0 to 100");
    return std::llround(percent / 100.0 * static_cast<double>(total_steps));
  }
  std::int64_t warmup = 0;
  if (!parse_whole(field, warmup)) bad_schedule(text, "WARMUP is not an integer or a percentage");
  return warmup;
}

}  // namespace

std::unique_ptr<LrSchedule> make_constant_lr(float lr) {
  check_lr("constant lr schedule", lr);
  return std::make_unique<ConstantLr>(lr);
}

std::unique_ptr<LrSchedule> make_step_lr(float lr, std::int64_t step_size, float gamma) {
  check_lr("step lr schedule", lr);
  if (step_size <= 0) throw std::invalid_argument("step lr schedule: step_size must be > 0");
  if (!(gamma > 0.0f && std::isfinite(gamma))) {
    throw std::invalid_argument("step lr schedule: gamma must be finite and > 0");
  }
  return std::make_unique<StepLr>(lr, step_size, gamma);
}

std::unique_ptr<LrSchedule> make_warmup_cosine_lr(float lr, std::int64_t warmup_steps,
                                                  std::int64_t total_steps, float min_lr) {
  check_lr("cosine lr schedule", lr);
  if (warmup_steps < 0) throw std::invalid_argument("cosine lr schedule: warmup steps must be >= 0");
  if (total_steps < warmup_steps) {
    throw std::invalid_argument("cosine lr schedule: total steps (" + std::to_string(total_steps) +
                                ") must be >= warmup steps (" + std::to_string(warmup_steps) + ")");
  }
  if (!(min_lr >= 0.0f && min_lr <= lr)) {
    throw std::invalid_argument("cosine lr schedule: min_lr must be in [0, lr]");
  }
  return std::make_unique<WarmupCosineLr>(lr, warmup_steps, total_steps, min_lr);
}

std::unique_ptr<LrSchedule> parse_lr_schedule(const std::string& text, float lr, std::int64_t total_steps) {
  const auto parts = split(text, ':');
  const std::string_view kind = parts[0];
  try {
    if (kind == "constant") {
      if (parts.size() != 1) bad_schedule(text, "constant takes no arguments");
      return make_constant_lr(lr);
    }
    if (kind == "step") {
      if (parts.size() != 3) bad_schedule(text, "step needs STEP_SIZE and GAMMA");
      std::int64_t step_size = 0;
      float gamma = 0;
      if (!parse_whole(parts[1], step_size)) bad_schedule(text, "STEP_SIZE is not an integer");
      if (!parse_whole(parts[2], gamma)) bad_schedule(text, "GAMMA is not a number");
      return make_step_lr(lr, step_size, gamma);
    }
    if (kind == "cosine") {
      if (parts.size() > 2) bad_schedule(text, "cosine takes at most WARMUP");
      const std::int64_t warmup = parts.size() == 2 ? parse_warmup(text, parts[1], total_steps) : 0;
      return make_warmup_cosine_lr(lr, warmup, total_steps);
    }
  } catch (const std::invalid_argument& e) {
    // Messages from bad_schedule already name the flag; range errors from the factories
    // get the flag and the forms added.
    if (std::string_view(e.what()).starts_with("--lr-schedule")) throw;
    bad_schedule(text, e.what());
  }
  bad_schedule(text, "unknown schedule");
}

}  // namespace hearsay
