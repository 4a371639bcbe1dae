#include "sim/fault_log.hpp"

#include <cstdio>

namespace hearsay::sim {

bool reached(const FaultTime& t, double elapsed_s, double run_epochs) {
  return t.unit == FaultTime::Unit::seconds ? elapsed_s >= t.value : run_epochs >= t.value;
}

FaultLog::FaultLog(const std::vector<Fault>& faults) : faults_(faults) {
  for (const auto& f : faults_) {
    FaultFiring firing;
    firing.fault = f.text;
    firing.kind = f.kind;
    firing.peer = f.kind == Fault::Kind::partition ? -1 : f.peer;
    firings_.push_back(std::move(firing));
  }
}

void FaultLog::observe(double elapsed_s, double run_epochs) {
  for (std::size_t i = 0; i < faults_.size(); ++i) {
    const Fault& f = faults_[i];
    FaultFiring& firing = firings_[i];
    if (f.kind == Fault::Kind::kill || f.kind == Fault::Kind::restart || f.kind == Fault::Kind::freeze ||
        f.kind == Fault::Kind::disk_full)
      continue;
    const bool started = reached(f.at, elapsed_s, run_epochs);
    const bool span = f.kind == Fault::Kind::partition || (f.kind == Fault::Kind::link && !f.to_the_end);
    if (!span) {
      if (started && !firing.fired) fired(i, elapsed_s, run_epochs);
      continue;
    }
    const bool ended = reached(f.until, elapsed_s, run_epochs);
    // Start and end both passed between two looks: the control files never said it.
    if (started && !ended && !firing.fired) fired(i, elapsed_s, run_epochs);
    if (ended && firing.fired && !firing.healed_s) firing.healed_s = elapsed_s;
  }
}

void FaultLog::fired(std::size_t index, double elapsed_s, double run_epochs) {
  FaultFiring& firing = firings_.at(index);
  if (firing.fired) return;
  firing.fired = true;
  firing.time_s = elapsed_s;
  firing.run_epochs = run_epochs;
}

void FaultLog::healed(std::size_t index, double elapsed_s) {
  FaultFiring& firing = firings_.at(index);
  if (firing.fired && !firing.healed_s) firing.healed_s = elapsed_s;
}

std::string FaultLog::not_fired(double wall_s, double run_epochs) const {
  std::string names;
  for (const auto& f : firings_)
    if (!f.fired) names += (names.empty() ? "" : ", ") + f.fault;
  if (names.empty()) return {};
  char when[96];
  std::snprintf(when, sizeof when, "the run ended at %.1f s (%.2f epochs)", wall_s, run_epochs);
  return names + " never fired: " + when;
}

}  // namespace hearsay::sim
