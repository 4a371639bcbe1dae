// `hearsay sim --engine virtual`: one run of N peers in this process, in virtual time.
//
// Every peer is a VirtualPeer (virtual_peer.hpp) on one fiber::Scheduler: the same
// training loop, algorithm, Mixer and link emulation as a peer process, with time that
// moves only by the modelled cost of computation (a step: --step-time, a draw of
// --step-time-dist, or this machine's measured step time, times a slow peer's factor) and
// of messages (latency plus size over bandwidth, queued on the sender's link). Steps
// that overlap in virtual time compute in parallel on --threads threads; the result does
// not depend on how many.
//
// Faults happen in virtual time: kill (the peer's endpoint dies: all-reduce fails naming
// it, gossip goes on), slow, link and partition; restart is refused. Evaluation points are
// as in the process engine, by epochs of the whole run: the averaged model on the full
// test set, the consensus distance over all live peers, and each peer's own accuracy on a
// seeded sample of --eval-peers peers. The result is the process engine's RunResult, in
// virtual seconds, with the real seconds it took.
#pragma once
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "model/data/dataset.hpp"
#include "sim/fault_spec.hpp"
#include "sim/sim_config.hpp"
#include "sim/sim_run.hpp"

namespace hearsay::sim {

// As run_simulation (sim_run.hpp), in virtual time.
RunResult run_virtual_simulation(const SimConfig& cfg, const std::vector<Fault>& faults,
                                 const std::string& algo, int repeat, std::uint64_t seed,
                                 const TrainTest& data, const std::filesystem::path& dir,
                                 const std::function<void(const RunProgress&)>& progress,
                                 const std::function<bool()>& stop);

// The modelled step time of --step-time-dist "lognormal:MEDIAN,SIGMA": MEDIAN a duration,
// SIGMA >= 0 the log's standard deviation. std::invalid_argument saying the form.
struct StepTimeDist {
  std::chrono::nanoseconds median{0};
  double sigma = 0;
};
StepTimeDist parse_step_time_dist(const std::string& text);

}  // namespace hearsay::sim
