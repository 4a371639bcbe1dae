#include "peer/run_budget.hpp"

#include "gossip/mixing/algorithms/registry.hpp"

namespace hearsay {

RunPlan plan_run(const PeerConfig& cfg, const std::string& id, std::int64_t shard, std::int64_t train_set,
                 bool ended_by_simulator) {
  const auto& t = cfg.train;
  const auto& n = cfg.network;
  const bool ranked = n.rank >= 0 && n.world > 0;
  RunPlan plan;
  // With fixed ranks every peer takes the same steps per epoch, whatever its shard's size.
  plan.order.emplace(shard, data_order_seed(t.seed, id),
                     examples_per_epoch(train_set, shard, ranked ? n.world : 0));
  plan.steps_per_epoch = steps_per_epoch(plan.order->per_epoch(), t.batch);
  if (ranked) {
    plan.progress = std::make_shared<transport::ProgressEstimate>(n.world);
    if (cfg.mixing.average_over == "examples")
      plan.shard_share = static_cast<double>(shard) * n.world / static_cast<double>(train_set);
  }
  const algorithms::AlgorithmTraits* traits = algorithms::find_algorithm(cfg.mixing.algo);
  plan.budget =
      std::make_unique<RunBudget>(cfg.budget, traits != nullptr && traits->lockstep(cfg.mixing.overlap),
                                  traits != nullptr && !traits->survives_lost_peer, t.epochs,
                                  plan.steps_per_epoch, plan.progress, ended_by_simulator);
  plan.schedule = std::make_unique<BudgetedSchedule>(
      parse_lr_schedule(t.lr_schedule, t.lr, plan.budget->planned_steps()), *plan.budget);
  return plan;
}

}  // namespace hearsay
