// Whether a simulated run diverged, and where it began: a run that diverged is never
// reported `ok`, whatever its peers' exit codes say.
//
// Diverged when:
//   - a peer says so (its metrics' "diverged" record: `hearsay peer` stops with exit 3),
//     or its metrics, replayed through the same DivergenceWatch, show its loss or
//     partner distance blowing up;
//   - the final averaged model, or the peers on average, end at chance (at most 2 points
//     above 1 / classes);
//   - the consensus distance grew a thousandfold from its lowest earlier evaluation, to
//     more than the squared norm of the averaged model (peers further apart than the
//     model is large).
// Apart (the status says "apart:", not ok) when the final averaged model and the peers'
// own models differ in accuracy by more than kApartMargin, either way: the peers hold no
// common model, so neither figure is the run's result (an averaged model far above its
// peers is one nobody trains; peers far above their average are models that never mixed).
// Drifting (the status says "drifting:", not ok) when the consensus distance ends at more
// than kDriftGrowth times its lowest value over the second half of the run (or times
// kDriftFloor of the averaged model's squared norm, when that is larger: agreement to a
// rounding is no scale), rising over each of the last two evaluations: the peers move
// apart while the learning rate falls, which a bounded consensus does not (a consensus
// step at its stability limit, or copies in doubt after faults). A jump at the final
// evaluation alone is not a trend: asynchronous peers that end at different times train
// their last steps alone. A distance still rising at the end at more than kRunawayGrowth
// times its lowest of the whole run drifts too, however it rose in the second half: a
// consensus step past its stability limit rose 355-fold over a LeNet run, less than 2-fold
// over its second half, where a bounded one rose 23-fold from its first evaluation.
// The status names the peer and the step where it began: the peer whose divergence (or,
// for the run-wide signs, whose rise in loss or partner distance) began first.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model/divergence.hpp"
#include "sim/evaluation.hpp"

namespace hearsay::sim {

class DivergenceCheck {
 public:
  DivergenceCheck(int peers, int classes);

  // One record of rank's metrics file, in file order (a "start" record begins a new
  // process of that rank: a restart).
  void observe(int rank, const nlohmann::json& record);
  // "diverged: ..." naming where, or empty. `curve` is the run's evaluations in time
  // order; `has_final`: its last one is of the final parameters.
  std::string verdict(const std::vector<Evaluation>& curve, bool has_final) const;

  static constexpr double kChanceMargin = 0.02;
  static constexpr double kConsensusGrowth = 1000;
  // 25 points: a restarted peer that rejoins late and ends at chance moves the peers' mean
  // by 1/peers of the gap, about 10 points of 8 peers; the drift this catches was 59 and
  // 73 points (docs/PERFORMANCE.md, ResNet-20 with randk:1% and int8).
  static constexpr double kApartMargin = 0.25;
  // Four times in the second half of the run: gossip with sign at γ 0.3 behind a lossy
  // link and a restart went 1.5 to 35 (23x), D-PSGD with topk:1% at γ 0.1 under the same
  // 6 to 63; bounded runs at their stability limit rose at most 2x (docs/PERFORMANCE.md).
  static constexpr double kDriftGrowth = 4;
  static constexpr double kRunawayGrowth = 100;  // over the whole run, however few evaluations
  static constexpr double kDriftFloor = 1e-3;  // below it the peers agree to a rounding
  static constexpr int kDriftEvaluations = 3;  // in the second half, to tell a trend

 private:
  struct Peer {
    DivergenceWatch watch;
    std::optional<Divergence> reported;  // its own "diverged" record
  };
  // The peer whose divergence began first, and that divergence.
  std::optional<std::pair<int, Divergence>> first_divergence() const;
  // " (from step S on rankR, where its loss or partner distance began to rise)", or "".
  std::string where_it_began() const;
  // "apart: ..." when the final evaluation's averaged model and mean peer differ by more
  // than kApartMargin, or empty.
  std::string apart_verdict(const std::vector<Evaluation>& curve, bool has_final) const;
  // "drifting: ..." when the consensus distance grew as the class comment says, or empty.
  std::string drift_verdict(const std::vector<Evaluation>& curve, bool has_final) const;

  int classes_;
  std::vector<Peer> peers_;
};

}  // namespace hearsay::sim
