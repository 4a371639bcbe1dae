// Whether a training run diverged, and where it began, from what a peer reports at every
// interval: its training loss and its partner distance (the mean distance to the peers it
// mixed with). `hearsay peer` watches its own run with it and stops when it diverges;
// `hearsay sim` replays every peer's metrics through it to name the peer and the step.
//
// Diverged, once one of these holds:
//   - the loss is not finite, or above 10x the loss of a uniform guess (ln of the number
//     of classes): a model that confident and that wrong has blown up;
//   - the partner distance is not finite, or above 1000x the largest of the first 5
//     reported: peers drift apart by training noise and are pulled together by mixing,
//     by a few times at most, even across a restart or a partition; mixing that amplifies
//     differences grows them exponentially (from 5 to 7e13 in 100 steps once).
// Where it began: the first step of the final excursion of that metric, the earliest
// step from which it stayed above twice the best value it had before.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hearsay {

struct Divergence {
  std::int64_t step = 0;         // when it was seen
  std::int64_t began_at = 0;     // where the excursion began
  std::string what;              // "the loss became nan", "the partner distance grew from 0.59 to 8.2e+05"
  std::string describe() const;  // "diverged at step 34 (began at step 25): the loss became nan"
  bool operator==(const Divergence&) const = default;
};

class DivergenceWatch {
 public:
  // classes: of the model's output, for the loss of a uniform guess (at least 2).
  explicit DivergenceWatch(int classes);

  // One interval's report: step, mean loss, partner distance (0 or less: none this
  // interval). Returns the divergence the first time it is seen, else nothing.
  std::optional<Divergence> observe(std::int64_t step, double loss, double partner_distance);
  const std::optional<Divergence>& divergence() const noexcept { return divergence_; }
  // Where the excursion of either metric in progress began (its latest value more than
  // twice its best before), whether or not it is a divergence yet.
  std::optional<std::int64_t> excursion_began() const;

  static constexpr double kLossFactor = 10;
  static constexpr double kDistanceFactor = 1000;
  static constexpr int kEarlyDistances = 5;

 private:
  struct Point {
    std::int64_t step;
    double value;  // +inf for a value that is not finite
  };
  // The first step from which `series` stayed above twice its best before, when its last
  // value is; nullopt otherwise.
  static std::optional<std::int64_t> excursion(const std::vector<Point>& series);

  double loss_limit_;
  std::vector<Point> losses_, distances_;
  double early_distance_ = 0;
  std::optional<Divergence> divergence_;
};

}  // namespace hearsay
