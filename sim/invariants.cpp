#include "sim/invariants.hpp"

#include <cmath>
#include <string_view>

#include "gossip/mixing/algorithms/registry.hpp"
#include "sim/sim_run.hpp"

namespace hearsay::sim {
namespace {

InvariantCheck ends(const RunResult& r) {
  if (r.status.starts_with("timeout")) return {"ends", false, "it was stopped: " + r.status};
  if (r.status.find("never ended") != std::string::npos) return {"ends", false, r.status};
  return {"ends", true, ""};
}

InvariantCheck finite(const RunResult& r) {
  for (const Evaluation& e : r.curve)
    if (!std::isfinite(e.loss_avg_model) || !std::isfinite(e.acc_avg_model) ||
        !std::isfinite(e.consensus_distance))
      return {"finite", false,
              "the evaluation at " + std::to_string(e.time_s) + " s has a loss of " +
                  std::to_string(e.loss_avg_model) + " and a consensus distance of " +
                  std::to_string(e.consensus_distance)};
  for (const std::string_view word : {"nan", "inf", "non-finite"})
    if (r.status.starts_with("diverged") && r.status.find(word) != std::string::npos)
      return {"finite", false, r.status};
  return {"finite", true, ""};
}

InvariantCheck faults_reported(const RunResult& r, const std::vector<Fault>& faults) {
  if (r.fault_firings.size() != faults.size())
    return {"faults", false,
            std::to_string(faults.size()) + " faults scheduled, " + std::to_string(r.fault_firings.size()) +
                " reported"};
  for (std::size_t i = 0; i < faults.size(); ++i) {
    const FaultFiring& f = r.fault_firings[i];
    if (f.fault != faults[i].text)
      return {"faults", false, "fault " + faults[i].text + " is reported as " + f.fault};
    if (!f.fired) {
      if (r.status.find(f.fault) == std::string::npos && !r.status.starts_with("failed") &&
          !r.status.starts_with("diverged") && r.status != "interrupted")
        return {"faults", false, f.fault + " did not fire, and the status does not say so"};
      continue;
    }
    // A second of slack: the process engine looks at its peers every 20 ms, and a fault
    // delivered as the last peer ends is logged after the run's clock stopped.
    if (f.time_s < 0 || f.time_s > r.wall_s + 1.0)
      return {"faults", false,
              f.fault + " fired at " + std::to_string(f.time_s) + " s, outside the run of " +
                  std::to_string(r.wall_s) + " s"};
    if (f.healed_s && *f.healed_s + 1e-9 < f.time_s)
      return {"faults", false, f.fault + " healed before it fired"};
  }
  return {"faults", true, ""};
}

InvariantCheck status(const RunResult& r, const std::vector<Fault>& faults) {
  const std::string& s = r.status;
  if (s == "ok" || s.starts_with("ok (")) return {"status", true, ""};
  if (s.starts_with("diverged: ")) {
    const bool where = s.find("step") != std::string::npos || s.find("at chance") != std::string::npos ||
                       s.find("consensus distance") != std::string::npos;
    return {"status", where, where ? "" : "diverged, but not where: " + s};
  }
  // Peers that hold no common model (apart) or move away from one (drifting), said with
  // the consensus distance: a true report of the end.
  for (const std::string kind : {"apart", "drifting"})
    if (s.starts_with(kind + ": ")) {
      const bool how_far = s.find("consensus distance") != std::string::npos;
      return {"status", how_far, how_far ? "" : kind + ", but not how far: " + s};
    }
  if (s.starts_with("failed: ")) {
    const auto* traits = algorithms::find_algorithm(r.algo);
    const bool may_fail = traits != nullptr && !traits->survives_lost_peer;
    bool loses_peers = false;
    for (const Fault& f : faults)
      loses_peers = loses_peers || f.kind == Fault::Kind::kill || f.kind == Fault::Kind::restart ||
                    f.kind == Fault::Kind::freeze || f.kind == Fault::Kind::partition ||
                    (f.kind == Fault::Kind::link && f.link.loss > 0);
    const bool names_peer = s.find("rank") != std::string::npos;
    if (may_fail && loses_peers && names_peer) return {"status", true, ""};
    return {"status", false,
            r.algo + (may_fail ? " failed without naming the peer it lost: " : " must train on, but ") + s};
  }
  return {"status", false, "ended '" + s + "'"};
}

InvariantCheck checkpoints(const RunResult& r) {
  if (r.checkpoint_problems.empty()) return {"checkpoints", true, ""};
  std::string all;
  for (const auto& p : r.checkpoint_problems) all += (all.empty() ? "" : "; ") + p;
  return {"checkpoints", false, all};
}

InvariantCheck weight(const RunResult& r, const std::vector<Fault>& faults) {
  if (!r.push_sum_weight) return {"weight", true, "", false};
  const double w = *r.push_sum_weight;
  int deaths = 0, restarts = 0;
  for (std::size_t i = 0; i < faults.size() && i < r.fault_firings.size(); ++i) {
    if (!r.fault_firings[i].fired) continue;
    deaths += faults[i].kind == Fault::Kind::kill || faults[i].kind == Fault::Kind::restart;
    restarts += faults[i].kind == Fault::Kind::restart;
  }
  const double n = r.peers;
  // Shares are split and summed in double: a few ulps per round, far below this.
  const double rounding = 1e-6 * n;
  const std::string counted = "the network's push-sum weight at the end is " + std::to_string(w) + " for " +
                              std::to_string(r.peers) + " peers";
  if (deaths == 0 && std::abs(w - n) > rounding) return {"weight", false, counted + ", and no peer died"};
  if (!(w > 0) || w > n + restarts + rounding)
    return {"weight", false, counted + " and " + std::to_string(restarts) + " restarts"};
  return {"weight", true, ""};
}

}  // namespace

std::vector<InvariantCheck> check_invariants(const RunResult& r, const std::vector<Fault>& faults) {
  return {ends(r),           finite(r),      faults_reported(r, faults),
          status(r, faults), checkpoints(r), weight(r, faults)};
}

std::string first_violation(const RunResult& r) {
  for (const InvariantCheck& c : r.invariants)
    if (!c.held) return c.name + ": " + r.algo + " run " + std::to_string(r.repeat) + ": " + c.detail;
  return "";
}

}  // namespace hearsay::sim
