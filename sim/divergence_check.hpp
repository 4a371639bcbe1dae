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

 private:
  struct Peer {
    DivergenceWatch watch;
    std::optional<Divergence> reported;  // its own "diverged" record
  };
  // The peer whose divergence began first, and that divergence.
  std::optional<std::pair<int, Divergence>> first_divergence() const;
  // " (from step S on rankR, where its loss or partner distance began to rise)", or "".
  std::string where_it_began() const;

  int classes_;
  std::vector<Peer> peers_;
};

}  // namespace hearsay::sim
