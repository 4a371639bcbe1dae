// What the simulator measures at an evaluation point: the test accuracy of the averaged
// model (the mean of the live peers' parameters), each peer's own accuracy, and the
// consensus distance (1/n) sum_i ||x_i - x_bar||^2 over the parameters (a resnet20's
// BatchNorm statistics are averaged into the mean model but left out of the distance).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "model/data/dataset.hpp"
#include "model/model.hpp"
#include "model/trainer.hpp"
#include "sim/external_evaluator.hpp"

namespace hearsay::sim {

struct PeerParams {
  int rank = -1;
  std::vector<float> params;
};

struct Evaluation {
  double time_s = 0;      // since the run started
  double run_epochs = 0;  // samples trained by all peers so far / training-set size
  int peers = 0;          // whose parameters were evaluated
  double acc_avg_model = 0;
  double loss_avg_model = 0;
  double acc_mean_peer = 0;
  double acc_min_peer = 0;
  double acc_max_peer = 0;
  double acc_std_peer = 0;
  double consensus_distance = 0;
  double avg_model_sq_norm = 0;  // ||x_bar||^2: the scale the consensus distance compares with
  // Bytes each peer sent so far (the mean over the run's peers) when the point was taken;
  // -1 when not known.
  double bytes_per_peer = -1;
};

// The ranks whose own accuracy is evaluated: all of them when k >= peers, else k drawn
// without replacement from a stream seeded by `seed`, in rank order.
std::vector<int> sampled_peers(int peers, int k, std::uint64_t seed);

class Evaluator {
 public:
  // Evaluates on `test` (kept by reference: it must outlive the evaluator) with hearsay's
  // `model`, or, when `external` is given, through it (a script's own model and test set:
  // external_evaluator.hpp; every value of its state counts in the consensus distance).
  Evaluator(const std::string& model, const Dataset& test,
            std::shared_ptr<ExternalEvaluator> external = nullptr);
  // Floats of a peer's state (parameters and buffers), as peers send it.
  std::int64_t state_count() const { return external_ ? external_->count() : model_->state_count(); }
  const std::string& fingerprint() const { return fingerprint_; }
  // Fills everything but time_s and run_epochs. Throws std::invalid_argument for no peers
  // or a parameter vector of the wrong size. The averaged model and the consensus distance
  // are over all of `peers`; each peer's own accuracy (acc_*_peer) over those whose rank is
  // in `own_accuracy` (all when it is empty), so that a thousand peers do not cost a
  // thousand test passes.
  Evaluation evaluate(const std::vector<PeerParams>& peers, const std::vector<int>& own_accuracy = {});
  // Test-set passes on `threads` threads from now on (one at construction: the peers
  // have the cores while they train). Not to be called during evaluate().
  void set_threads(int threads);

 private:
  double accuracy_of(const std::vector<float>& params, double* loss = nullptr);

  std::shared_ptr<ExternalEvaluator> external_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Trainer> trainer_;
  const Dataset& test_;
  std::string fingerprint_;
};

}  // namespace hearsay::sim
