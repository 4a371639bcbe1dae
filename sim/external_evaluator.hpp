// The evaluation of a model that only its own script knows (`hearsay sim --peer-command`
// with a torch.nn.Module that is none of hearsay's models): the simulator starts the
// script once more as its evaluator, with HEARSAY_EVALUATOR="R:W" naming two pipes, and
// the script's hearsay.torch.evaluate_with(model, fn) serves it (python/hearsay/torch.py):
//
//   evaluator -> simulator   one JSON line {"fingerprint": "torch-...", "count": N}
//   simulator -> evaluator   a request: u64 N (little-endian), then N float32: a model's
//                            flat state in the peers' buffer order
//   evaluator -> simulator   the answer: two f64, accuracy in [0, 1] and mean loss
//
// The simulator closes its pipe when it is done and the evaluator exits. One request at a
// time, on the simulator's evaluation thread (evaluation_worker.hpp).
#pragma once
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace hearsay::sim {

class ExternalEvaluator {
 public:
  // Starts `command` through /bin/sh with `args` after it (as a peer's flags follow its
  // command: the run's rank 0's, so that the script reads the run's --data and settings),
  // its output appended to `log`, and waits up to `timeout` for its first line.
  // std::runtime_error saying why (with the log's last error line) when it ends first,
  // says nothing in time or says something else.
  ExternalEvaluator(const std::string& command, const std::vector<std::string>& args,
                    const std::filesystem::path& log, std::chrono::seconds timeout);
  // Closes the pipes; the evaluator ends (SIGKILL after a second otherwise). Never throws.
  ~ExternalEvaluator();
  ExternalEvaluator(const ExternalEvaluator&) = delete;
  ExternalEvaluator& operator=(const ExternalEvaluator&) = delete;

  const std::string& fingerprint() const noexcept { return fingerprint_; }
  std::int64_t count() const noexcept { return count_; }
  // (accuracy, loss) of the model with these values. std::invalid_argument for the wrong
  // count; std::runtime_error when the evaluator fails (it ended, wrote something else).
  std::pair<double, double> evaluate(std::span<const float> state);

 private:
  void write_all(const void* data, std::size_t bytes);
  void read_all(void* data, std::size_t bytes);
  // The first line, within `timeout`: the fingerprint and count.
  void read_handshake(const std::string& command, std::chrono::seconds timeout);
  // Closes the pipes and ends the script (a second's grace, then SIGKILL). Never throws.
  void end_script() noexcept;

  const std::filesystem::path log_;
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;  // our ends of the pipes
  std::string fingerprint_;
  std::int64_t count_ = 0;
};

struct SimConfig;
// With --peer-command, the script's evaluator for a run of `algo` when its model is none of
// hearsay's (started with rank 0's flags); null when it is --model or there is no peer
// command. std::runtime_error when the evaluator does not start.
std::shared_ptr<ExternalEvaluator> start_script_evaluator(const SimConfig& cfg, const std::string& algo,
                                                          std::uint64_t seed, const std::string& run_id,
                                                          const std::filesystem::path& dir);

}  // namespace hearsay::sim
