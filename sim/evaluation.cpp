#include "sim/evaluation.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "base/rng.hpp"
#include "model/zoo.hpp"

namespace hearsay::sim {

namespace {
// Evaluation batches of up to 500 examples (LeNet's), fewer where a batch's workspace
// would pass 128 MB: a resnet20 batch of 500 would take gigabytes, and passes that leave
// the caches run slower per example, not faster.
constexpr std::int64_t kEvalBatch = 500;
constexpr std::int64_t kEvalWorkspaceBytes = 128 << 20;

std::int64_t eval_batch(const Model& model) {
  const std::int64_t per_example = std::max<std::int64_t>(1, model.workspace_floats_per_example()) * 4;
  return std::clamp<std::int64_t>(kEvalWorkspaceBytes / per_example, 16, kEvalBatch);
}
}  // namespace

Evaluator::Evaluator(const std::string& model, const Dataset& test,
                     std::shared_ptr<ExternalEvaluator> external)
    : external_(std::move(external)),
      model_(make_model(model)),
      test_(test),
      fingerprint_(external_ ? external_->fingerprint() : model_->fingerprint()) {
  // One thread: the peers have the cores; the simulator evaluates in their gaps.
  trainer_ = std::make_unique<Trainer>(*model_, 1, eval_batch(*model_));
}

void Evaluator::set_threads(int threads) {
  trainer_ = std::make_unique<Trainer>(*model_, std::max(1, threads), eval_batch(*model_));
}

double Evaluator::accuracy_of(const std::vector<float>& params, double* loss) {
  if (external_) {
    const auto [accuracy, mean_loss] = external_->evaluate(params);
    if (loss) *loss = mean_loss;
    return accuracy;
  }
  std::copy(params.begin(), params.end(), model_->state().begin());
  const BatchStats s = trainer_->evaluate(test_.images.data(), test_.labels.data(), test_.count);
  if (loss) *loss = s.mean_loss();
  return s.accuracy();
}

Evaluation Evaluator::evaluate(const std::vector<PeerParams>& peers, const std::vector<int>& own_accuracy) {
  if (peers.empty()) throw std::invalid_argument("evaluate: no peer parameters");
  const auto count = static_cast<std::size_t>(state_count());
  for (const auto& p : peers)
    if (p.params.size() != count)
      throw std::invalid_argument("evaluate: rank " + std::to_string(p.rank) + " sent " +
                                  std::to_string(p.params.size()) + " parameters, the model has " +
                                  std::to_string(count));
  // The mean in double: with many peers a float sum would lose the small differences
  // the consensus distance is made of.
  std::vector<double> mean(count, 0.0);
  for (const auto& p : peers)
    for (std::size_t i = 0; i < count; ++i) mean[i] += p.params[i];
  const double n = static_cast<double>(peers.size());
  for (double& v : mean) v /= n;
  // The consensus distance is over the parameters: BatchNorm's statistics (resnet20) are
  // averaged into the mean model, but its batch counters differ by each peer's step count
  // and would swamp the distance of peers that drift apart in steps (gossip).
  const auto params = external_ ? count : static_cast<std::size_t>(model_->param_count());
  double distance = 0;
  for (const auto& p : peers)
    for (std::size_t i = 0; i < params; ++i) {
      const double d = p.params[i] - mean[i];
      distance += d * d;
    }

  Evaluation e;
  e.peers = static_cast<int>(peers.size());
  e.consensus_distance = distance / n;
  for (std::size_t i = 0; i < params; ++i) e.avg_model_sq_norm += mean[i] * mean[i];
  std::vector<float> averaged(mean.begin(), mean.end());
  e.acc_avg_model = accuracy_of(averaged, &e.loss_avg_model);
  std::vector<double> accs;
  for (const auto& p : peers)
    if (own_accuracy.empty() || std::ranges::binary_search(own_accuracy, p.rank))
      accs.push_back(accuracy_of(p.params));
  if (accs.empty())
    accs.push_back(accuracy_of(peers.front().params));  // the sample died: one live peer instead
  const double sampled = static_cast<double>(accs.size());
  double sum = 0, sq = 0;
  for (double a : accs) sum += a;
  e.acc_mean_peer = sum / sampled;
  for (double a : accs) sq += (a - e.acc_mean_peer) * (a - e.acc_mean_peer);
  e.acc_std_peer = std::sqrt(sq / sampled);
  e.acc_min_peer = *std::min_element(accs.begin(), accs.end());
  e.acc_max_peer = *std::max_element(accs.begin(), accs.end());
  return e;
}

std::vector<int> sampled_peers(int peers, int k, std::uint64_t seed) {
  std::vector<int> ranks(static_cast<std::size_t>(peers));
  std::iota(ranks.begin(), ranks.end(), 0);
  if (k >= peers) return ranks;
  Rng rng(seed ^ 0xe7a1e7a1ULL);
  rng.shuffle(ranks.begin(), ranks.end());
  ranks.resize(static_cast<std::size_t>(std::max(k, 1)));
  std::ranges::sort(ranks);
  return ranks;
}

}  // namespace hearsay::sim
