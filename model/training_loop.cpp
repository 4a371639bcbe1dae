#include "model/training_loop.hpp"

#include <algorithm>
#include <chrono>
#include <optional>

namespace hearsay {

void run_training(TrainingSession& session, const LrSchedule& schedule, std::int64_t epochs,
                  std::int64_t batch, TrainingPosition& position, const TrainingHooks& hooks) {
  using Clock = std::chrono::steady_clock;
  while (position.epoch <= epochs) {
    if (hooks.should_stop()) return;
    const std::vector<std::int64_t>& order = hooks.epoch_order(position.epoch);
    const auto size = static_cast<std::int64_t>(order.size());
    BatchStats epoch_stats;
    const auto started = Clock::now();
    bool stopped = false;
    for (std::int64_t first = position.epoch_step * batch; first < size; first += batch) {
      if (hooks.should_stop()) {
        stopped = true;
        break;
      }
      const std::int64_t n = std::min(batch, size - first);
      const auto computing = Clock::now();
      const BatchStats stats = session.compute_gradients(
          std::span(order).subspan(static_cast<std::size_t>(first), static_cast<std::size_t>(n)));
      hooks.after_gradients(stats, Clock::now() - computing);
      epoch_stats += stats;
      const StepReport report{position, stats, size};
      {
        std::optional<std::lock_guard<std::mutex>> lock;
        if (hooks.update_mutex != nullptr) lock.emplace(*hooks.update_mutex);
        session.apply_update(schedule.at(position.step));
        ++position.step;
        ++position.epoch_step;
        hooks.after_update(report);
      }
      hooks.after_step(report);
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
    hooks.after_epoch(EpochReport{position.epoch, !stopped, seconds, epoch_stats});
    if (stopped) return;
    ++position.epoch;
    position.epoch_step = 0;
  }
}

}  // namespace hearsay
