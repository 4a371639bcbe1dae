#include "sim/evaluation_worker.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "base/log.hpp"
#include "base/thread_name.hpp"

namespace hearsay::sim {

EvaluationWorker::EvaluationWorker(const std::string& model, const Dataset& test,
                                   std::vector<int> own_accuracy, std::shared_ptr<ExternalEvaluator> external)
    : evaluator_(model, test, std::move(external)), own_accuracy_(std::move(own_accuracy)) {
  thread_ = std::thread([this] {
    name_this_thread("hs-eval");
    run();
  });
}

EvaluationWorker::~EvaluationWorker() {
  {
    std::lock_guard lock(mutex_);
    closing_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void EvaluationWorker::submit(double time_s, double run_epochs, double bytes_per_peer,
                              std::vector<PeerParams> peers) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back({time_s, run_epochs, bytes_per_peer, std::move(peers)});
  }
  changed_.notify_all();
}

std::vector<Evaluation> EvaluationWorker::finish() {
  std::unique_lock lock(mutex_);
  draining_ = true;
  changed_.notify_all();
  changed_.wait(lock, [&] { return jobs_.empty() && !busy_; });
  return results_;
}

std::optional<double> EvaluationWorker::last_acc() const {
  std::lock_guard lock(mutex_);
  if (results_.empty()) return std::nullopt;
  return results_.back().acc_avg_model;
}

void EvaluationWorker::run() {
  // Below the peers: an evaluation may wait, the peers' steps should not.
  ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 10);
  std::unique_lock lock(mutex_);
  bool all_cores = false;
  for (;;) {
    changed_.wait(lock, [&] { return closing_ || !jobs_.empty(); });
    if (jobs_.empty()) return;
    Job job = std::move(jobs_.front());
    jobs_.erase(jobs_.begin());
    busy_ = true;
    const bool drain = draining_;
    lock.unlock();
    if (drain && !all_cores) {
      // The peers are done: the backlog (a test pass per peer per point) takes every core.
      evaluator_.set_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
      all_cores = true;
    }
    std::optional<Evaluation> e;
    try {
      e = evaluator_.evaluate(job.peers, own_accuracy_);
      e->time_s = job.time_s;
      e->run_epochs = job.run_epochs;
      e->bytes_per_peer = job.bytes_per_peer;
    } catch (const std::exception& ex) {
      logging::warn(std::string("sim: an evaluation failed: ") + ex.what());
    }
    lock.lock();
    busy_ = false;
    if (e) results_.push_back(*e);
    changed_.notify_all();
  }
}

}  // namespace hearsay::sim
