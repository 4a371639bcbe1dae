// VirtualRun's end: the totals summed and the status that says how the run went (ok, or
// what failed, diverged, timed out or never fired), as sim_run_end.cpp for peer processes.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>

#include "model/zoo.hpp"
#include "peer/metrics.hpp"
#include "sim/divergence_check.hpp"
#include "sim/virtual_simulation.hpp"

namespace hearsay::sim {
namespace {

long peak_rss_kb() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

}  // namespace

double VirtualRun::sent_per_peer() const {
  double bytes = 0;  // restarted peers' earlier lives sent bytes too
  for (const auto* group : {&peers_, &retired_})
    for (const auto& p : *group) bytes += static_cast<double>(p->bytes_sent());
  return bytes / cfg_.peers;
}

void VirtualRun::finish() {
  result_.wall_s = training_ended_s_;
  result_.real_s = std::chrono::duration<double>(WallClock::now() - wall_start_).count();
  evaluate(true);
  if (!result_.curve.empty()) result_.curve.back().time_s = training_ended_s_;
  result_.samples_per_s = result_.wall_s > 0 ? samples_ / result_.wall_s : 0;
  result_.bytes_sent_per_peer = sent_per_peer();
  result_.time_to_target_s = time_to_target(result_.curve, cfg_.target_acc);
  result_.bytes_to_target_per_peer = bytes_to_target(result_.curve, cfg_.target_acc);
  result_.budget = cfg_.budget;
  for (const auto& p : peers_) {
    result_.shard_examples.push_back(p->train_examples());
    result_.peer_steps.push_back(p->steps());
    result_.peer_final_lr.push_back(p->learning_rate());
    if (result_.peer_settings.is_null()) result_.peer_settings = settings_record(p->config());
    result_.peer_end_s.push_back(p->ended() && !p->killed() ? seconds(p->ended_at() - start_) : -1.0);
  }
  std::vector<const PushSumLedger*> ledgers;   // push-sum's mass, of the peers alive at the end
  std::vector<const PushSumLedger*> departed;  // and what the lives that died applied
  for (const auto& p : peers_) ledgers.push_back(!p->killed() && p->push_sum() ? &*p->push_sum() : nullptr);
  for (const auto& p : peers_)
    if (p->killed() && p->push_sum()) departed.push_back(&*p->push_sum());
  for (const auto& p : retired_)
    if (p->push_sum()) departed.push_back(&*p->push_sum());
  if (std::ranges::any_of(ledgers, [](const PushSumLedger* l) { return l != nullptr; }))
    result_.push_sum_weight = network_weight(ledgers, departed);
  result_.peak_rss_kb_max = peak_rss_kb();  // the whole process: every peer together
  result_.peak_rss_kb.assign(1, result_.peak_rss_kb_max);
  std::string status;
  const VirtualPeer* diverged = nullptr;  // the first to diverge, in time (then by rank)
  for (const auto& p : peers_)
    if (p->diverged() && (diverged == nullptr || p->ended_at() < diverged->ended_at())) diverged = &*p;
  if (diverged != nullptr) status = "diverged: " + diverged->id() + ": " + diverged->failure();
  if (status.empty()) {  // the first to fail, in time (exit_status in sim_run_end.cpp)
    const VirtualPeer* first = nullptr;
    for (const auto& p : peers_)
      if (!p->failure().empty() && !p->killed() && (first == nullptr || p->ended_at() < first->ended_at()))
        first = &*p;
    if (first != nullptr) status = "failed: " + first->id() + ": " + first->failure();
  }
  if (const auto stuck = scheduler_.stuck(); status.empty() && !stuck.empty())
    status = "failed: " + std::to_string(stuck.size()) + " fiber(s) never ended, the first '" +
             stuck.front() + "'";
  if (status.empty() || status.starts_with("failed")) {
    DivergenceCheck divergence(cfg_.peers, make_model(cfg_.training.model)->classes());
    if (std::string d = divergence.verdict(result_.curve, !result_.curve.empty()); !d.empty()) status = d;
  }
  if (timed_out_)
    status = "timeout after " + std::to_string(static_cast<int>(cfg_.run_timeout_s)) +
             " s of real time (--run-timeout)";
  if (interrupted_) status = "interrupted";
  result_.fault_firings = fault_log_.firings();
  const std::string not_fired = fault_log_.not_fired(result_.wall_s, run_epochs());
  result_.status = !status.empty() ? status : not_fired.empty() ? "ok" : "ok (" + not_fired + ")";
}

}  // namespace hearsay::sim
