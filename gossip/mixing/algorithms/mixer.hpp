// Runs an algorithm's communication on a background thread and applies what it did to
// the model's parameters between local steps: the training loop calls after_step()
// after every optimizer step and never touches a socket.
//
// The communication thread owns a working copy of the parameters. Every time the two
// threads meet (a sync), the model gets the working copy's change since the last sync
// as a delta (params += work - base), and the working copy restarts from the model's
// current values. Deltas rather than copies keep both kinds of change: the local steps
// the model took meanwhile, and what mixing did to the working copy (a round's result,
// or a partner averaging with us while we served its request between rounds).
//
// Every H-th step (options().gossip_every) syncs and starts a round, unless the
// algorithm declines it (Algorithm::round_needed: gossip after a partner averaged with
// us); a declined round takes no round number:
//   - without overlap, the training thread waits for the round and gets its result at
//     once: the mixed values replace the parameters exactly;
//   - with overlap, it hands the round over and goes on training; the result is applied
//     (as a delta) at the next round's start, one round stale. A round still running at
//     that point is waited for, so staleness never exceeds one round.
// Between rounds the communication thread answers partners' requests (serve()). The
// training thread's compute between round steps is timed and handed to the algorithm
// (Algorithm::compute_per_round), which bounds how long its rounds wait by it.
//
// With AlgorithmOptions::quasi_global_momentum the communication thread runs the momentum
// around every round (quasi_global_momentum.hpp): − β v before the algorithm mixes, v from
// the change across rounds after.
//
// With AlgorithmOptions::shard_share s ≠ 1 (unequal shards, --average-over examples) a
// sync scales the local steps since the last one by s: params = work + s (params − base).
// Every peer takes the same steps per epoch whatever its shard, so without it a peer's
// examples weigh in inverse proportion to its shard; scaled, the network's average moves
// by the mean of s_i times each peer's update, the gradient over the training set's
// examples, for every algorithm alike (all-reduce's average of the scaled updates is the
// average over examples, as one large batch). For SGD, with or without momentum, it is
// the learning rate times s, and it reaches a PyTorch peer's steps too.
//
// A failure of the communication thread (allreduce's PeerError) is rethrown on the
// training thread by the next after_step() or flush(); the thread keeps serving.
//
// When the run's peers change, set_peers() (from any thread) hands the new set to the
// communication thread, which gives it to the algorithm (Algorithm::set_peers) between
// rounds: before the next round at the latest. Round numbers, statistics and the
// algorithm's exchange log simply go on.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "base/fiber.hpp"
#include "gossip/mixing/algorithms/algorithm.hpp"
#include "gossip/mixing/algorithms/learnt_timeout.hpp"
#include "gossip/mixing/algorithms/quasi_global_momentum.hpp"
#include "model/parameter_store.hpp"

namespace hearsay::algorithms {

class Mixer {
 public:
  struct Stats {
    std::uint64_t rounds = 0;          // rounds finished
    std::uint64_t rounds_skipped = 0;  // round steps the algorithm declined (Algorithm::round_needed)
    double round_seconds = 0;          // summed wall time of the rounds
    double waiting_seconds = 0;        // summed time the training thread waited for rounds
  };

  // parameter_count: the size of every params span given later. first_round: the
  // number of the first round (a peer that rejoins a run of synchronous rounds starts at
  // the round its neighbours are in). buffers_from: a store whose mixer_buffer()s hold
  // the working copy and its base (a GPU's pinned memory); it must outlive the mixer.
  Mixer(std::unique_ptr<Algorithm> algorithm, std::size_t parameter_count, std::uint64_t first_round = 0,
        ParameterStore* buffers_from = nullptr);
  // Stops the communication thread (a round in progress finishes first; it is bounded
  // by the round deadline). Never throws.
  ~Mixer();
  Mixer(const Mixer&) = delete;
  Mixer& operator=(const Mixer&) = delete;

  // Training (re)starts now: the first round's compute is timed from here, so that it too
  // has a compute to bound its waits by (learnt_timeout.hpp). Without it the first round
  // of a run, and of a mixer built mid-run, waits up to the round timeout.
  void training_resumes();
  // After optimizer step `step` (counting from 1). Rethrows a stored failure. The
  // parameters are wherever the store keeps them (model/parameter_store.hpp: a host span,
  // or a GPU's memory); the span overload is the host store.
  void after_step(ParameterStore& params, std::uint64_t step);
  void after_step(std::span<float> params, std::uint64_t step);
  // Waits for a round in flight and applies everything mixed so far: before evaluating,
  // checkpointing or leaving.
  void flush(ParameterStore& params);
  void flush(std::span<float> params);

  // The run's peers are now `peers` (any thread): the communication thread hands them to
  // the algorithm (Algorithm::set_peers) before the next round starts, or at once while
  // idle; a later call replaces a set not handed over yet, and the next after_step() or
  // flush() waits until it is handed over. A set the algorithm refuses is a failure of the
  // communication thread, rethrown like a round's.
  void set_peers(PeerSet peers);
  // Stops the communication thread (a round in progress finishes first, a set_peers not
  // yet handed over is dropped): the mixer answers nobody from now on. Stats, the
  // algorithm and its exchange log stay readable; after_step() and flush() still sync
  // but start no round. The destructor does it too. Never throws.
  void stop() noexcept;

  Algorithm& algorithm() noexcept { return *algorithm_; }
  Stats stats() const;

 private:
  void run();                                          // the communication thread
  void hand_over_peers_locked();                       // new_peers_ to the algorithm
  // params = work + s (params - base) (s: options().shard_share); work = base = params.
  void sync_locked(ParameterStore& params);
  void wait_idle(std::unique_lock<std::mutex>& lock);  // until no round (nor a new set) is in flight
  void check_size(std::size_t given) const;
  void rethrow_failure_locked();
  // Times the compute since training last resumed and tells the algorithm the median.
  void note_compute(Clock::time_point due);

  std::unique_ptr<Algorithm> algorithm_;
  const std::size_t count_;
  // Training thread only: when it last went back to training from a round step, and the
  // compute times between round steps since (Algorithm::compute_per_round).
  Clock::time_point training_resumed_{};
  RecentDurations compute_{9};
  std::optional<QuasiGlobalMomentum> momentum_;  // communication thread only
  std::vector<float> owned_;  // work_ and base_ when no store gives them
  std::span<float> work_;     // the communication thread's copy (guarded by mutex_ unless a round runs)
  std::span<float> base_;     // work_ as of the last sync
  const float step_scale_;    // AlgorithmOptions::shard_share

  mutable std::mutex mutex_;
  fiber::ConditionVariable changed_;  // a fiber's wait parks it (base/fiber.hpp)
  bool round_requested_ = false;
  bool round_running_ = false;
  bool stopping_ = false;
  bool started_ = false;              // a sync has filled work_ at least once
  std::optional<PeerSet> new_peers_;  // set_peers(), not handed to the algorithm yet
  std::uint64_t next_round_ = 0;
  std::exception_ptr failure_;
  Stats stats_;
  fiber::Worker thread_;  // last: starts after everything above exists (a fiber in virtual time)
};

}  // namespace hearsay::algorithms
