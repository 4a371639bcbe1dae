// Evaluations run on their own low-priority thread, so collecting parameters and
// watching the peers never waits for a test-set pass.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "sim/evaluation.hpp"

namespace hearsay::sim {

class EvaluationWorker {
 public:
  // own_accuracy: the ranks whose own accuracy is measured (Evaluator::evaluate).
  // external: Evaluator's.
  EvaluationWorker(const std::string& model, const Dataset& test, std::vector<int> own_accuracy = {},
                   std::shared_ptr<ExternalEvaluator> external = nullptr);
  ~EvaluationWorker();
  EvaluationWorker(const EvaluationWorker&) = delete;
  EvaluationWorker& operator=(const EvaluationWorker&) = delete;

  std::int64_t state_count() const { return evaluator_.state_count(); }
  const std::string& fingerprint() const { return evaluator_.fingerprint(); }
  // Queues an evaluation of `peers` at this point of the run (bytes_per_peer:
  // Evaluation's).
  void submit(double time_s, double run_epochs, double bytes_per_peer, std::vector<PeerParams> peers);
  // Waits for every job submitted so far; returns all results in submission order. The
  // run's peers are done by then, so what is still queued is evaluated on every core.
  std::vector<Evaluation> finish();
  // The averaged-model accuracy of the latest evaluation done, if any.
  std::optional<double> last_acc() const;

 private:
  struct Job {
    double time_s, run_epochs, bytes_per_peer;
    std::vector<PeerParams> peers;
  };
  void run();

  Evaluator evaluator_;
  const std::vector<int> own_accuracy_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Job> jobs_;
  std::vector<Evaluation> results_;
  bool busy_ = false, closing_ = false, draining_ = false;
  std::thread thread_;
};

}  // namespace hearsay::sim
