// Which faults of a run fired, and when. A fault given in seconds can outlast a run that
// ends early, and one in epochs can fall between two looks at a short run: a report that
// listed such a fault as applied would say that an algorithm survived what it never met.
// So every fault is recorded with whether and when it fired, and a run in which one did
// not fire is not `ok` (not_fired() says which, and when the run ended).
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "sim/fault_spec.hpp"

namespace hearsay::sim {

// Whether time t has come, `elapsed_s` seconds into training and `run_epochs` epochs
// (samples trained by all peers over the training set) into it.
bool reached(const FaultTime& t, double elapsed_s, double run_epochs);

struct FaultFiring {
  std::string fault;  // as written
  Fault::Kind kind = Fault::Kind::kill;
  int peer = -1;       // the peer it hit; -1 for a partition
  bool fired = false;  // delivered (kill, restart, freeze) or in force (slow, link, partition)
  double time_s = 0;   // when it fired, in seconds since training began
  double run_epochs = 0;
  std::optional<double> healed_s;  // a partition or freeze: when it ended (none: it lasted to the end)
};

class FaultLog {
 public:
  explicit FaultLog(const std::vector<Fault>& faults);

  // Each watch interval: a slow or link fault fires when its time has come, a partition
  // when its start has and its end has not (the control files apply it then), and heals at
  // its end. Kill, restart, freeze and disk-full fire only when delivered (fired()).
  void observe(double elapsed_s, double run_epochs);
  // The simulator delivered kill, restart or freeze fault `index` (in the order written).
  void fired(std::size_t index, double elapsed_s, double run_epochs);
  // Freeze or disk-full fault `index` ended: its peer runs (writes) again, or was killed.
  void healed(std::size_t index, double elapsed_s);

  const std::vector<FaultFiring>& firings() const noexcept { return firings_; }
  // Empty when every fault fired; else which did not and when the run ended, e.g.
  // "kill:1@20s never fired: the run ended at 12.3 s (0.80 epochs)".
  std::string not_fired(double wall_s, double run_epochs) const;

 private:
  std::vector<Fault> faults_;
  std::vector<FaultFiring> firings_;
};

}  // namespace hearsay::sim
