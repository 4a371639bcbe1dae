// What the simulator knows of one rank of a run: its command line and files, where it
// listens, what its metrics and control file said last, and what the faults did to it.
#pragma once
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "gossip/network/emulation/control_file.hpp"
#include "peer/ready_file.hpp"
#include "sim/peer_setup.hpp"

namespace hearsay::sim {

// What a peer's metrics file says so far, read incrementally (the peer appends to it).
class MetricsTail {
 public:
  // Hands each complete record written since the last call to `each`, in file order.
  void read_new(const std::filesystem::path& path, const std::function<void(const nlohmann::json&)>& each);
  std::int64_t step() const { return step_; }  // the furthest "metrics" record's step
  // The bytes it sent, over all its lives: a restarted peer writes its file again from
  // a "start" record and counts from 0, so each life's last count is added to those before
  // it. (A new life that wrote more than the last one had before it is read is taken as
  // the same life, its bytes as they were.)
  double bytes_sent() const { return earlier_lives_bytes_ + bytes_sent_; }

 private:
  std::ifstream file_;
  std::string partial_;  // a line not finished yet
  std::uint64_t read_ = 0;  // bytes read of the file
  std::int64_t step_ = 0;
  double bytes_sent_ = 0;           // this life's
  double earlier_lives_bytes_ = 0;  // the lives before it
};

// Why a peer ended, for the run's status: the last line of its log that `hearsay peer`
// wrote on its way out ("hearsay peer: ..."), or the crash it reported (the signal, and
// that its stack is in the log), else the last that says error.
std::string last_error_line(const std::filesystem::path& log);

// The crash report in a peer's log (base/crash_report.hpp): its lines from the signal's to
// the addr2line command, or "" when the peer did not report a crash.
std::string crash_report_in(const std::filesystem::path& log);

struct PeerRecord {
  PeerRecord(int rank, std::vector<std::string> argv, const std::filesystem::path& run_dir);

  int rank;
  std::string id;                 // rank<R>
  std::vector<std::string> argv;  // without --join, --resume and --wait-for-world
  PeerFiles files;
  emulation::PeerControl control;  // what its control file says now
  std::optional<PeerReady> ready;  // its ready file, once it listens (again, after a restart)
  MetricsTail metrics;
  bool ready_to_train = false;       // its "ready" metrics record came: joined, the world whole, held
  std::int64_t paused_at = -1;       // the step it paused at for a kill or restart in epochs (-1: none)
  bool killed = false;               // a kill fault ended it for good
  std::int64_t shard_examples = -1;  // its shard's size, from its "start" record (-1: not yet)
  nlohmann::json settings;           // its "start" record's settings (null: not yet)
};

}  // namespace hearsay::sim
