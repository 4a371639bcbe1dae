// One peer of `hearsay sim --engine virtual`: what a `hearsay peer` process holds (its
// shard, model, optimizer, schedule, training session, transport, algorithm and Mixer),
// built from the very command line the process engine would start it with, and run as
// fibers of the run's fiber::Scheduler (base/fiber.hpp).
//
// What is the same as in a peer process: the training loop (run_training), the epoch
// order, the algorithm (make_algorithm with algorithm_options), the Mixer and its thread
// (a fiber here), the link emulation (an EmulatedTransport over the in-process fabric, its
// delay line a fiber), the wire and its admission. What differs: a step's computation
// costs its modelled time (StepCost) instead of the time it took, membership is an oracle
// (gossip is told of a peer's end or death at once, where heartbeats take a few seconds),
// and nothing is written per peer.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/fiber.hpp"
#include "gossip/mixing/algorithms/mixer.hpp"
#include "gossip/network/emulation/emulated_transport.hpp"
#include "gossip/network/transport/inproc_transport.hpp"
#include "model/data/dataset.hpp"
#include "model/data/epoch_order.hpp"
#include "model/divergence.hpp"
#include "model/model.hpp"
#include "model/optim/optimizer.hpp"
#include "model/optim/schedule.hpp"
#include "model/training_loop.hpp"
#include "model/training_session.hpp"
#include "peer/peer_config.hpp"
#include "peer/run_budget.hpp"
#include "sim/push_sum_ledger.hpp"

namespace hearsay::sim {

// What a peer's periodic checkpoint holds (--checkpoint-every, in virtual time): what a
// restarted peer resumes from, as a peer process does with --resume.
struct VirtualCheckpoint {
  std::vector<float> state;      // parameters and buffers
  std::vector<float> optimizer;  // the optimizer's state
  TrainingPosition position;
};

// What the run gives each peer.
struct VirtualPeerLinks {
  fiber::Scheduler* scheduler = nullptr;
  std::shared_ptr<transport::InprocFabric> fabric;
  const TrainTest* data = nullptr;  // the whole data set, loaded once for all peers
  // The modelled time of this peer's next step (its factor and draws included).
  std::function<fiber::Scheduler::duration(int rank)> step_cost;
  // After each of this peer's steps (examples trained): evaluation points, epoch faults.
  std::function<void(int rank, std::int64_t examples)> after_step;
  // When this peer's training ended, for whatever reason.
  std::function<void(int rank)> ended;
  // Once its transport is closed too (after `ended`): its id may be taken again.
  std::function<void(int rank)> gone;
  // After it took evaluation snapshot k (--snapshot-every: exact-step evaluation).
  std::function<void(int rank, std::int64_t k)> snapshot_taken;
};

class VirtualPeer {
 public:
  // args: the peer's command line (sim/peer_setup.hpp's peer_arguments, argv[0] first).
  // Builds the shard, model, optimizer and session now; the transport and mixer are made on
  // the peer's fiber (start()), where their threads become fibers.
  // resume: a checkpoint to go on from (a restart), or null.
  VirtualPeer(int rank, const std::vector<std::string>& args, VirtualPeerLinks links,
              std::shared_ptr<const VirtualCheckpoint> resume = nullptr);
  ~VirtualPeer();
  VirtualPeer(const VirtualPeer&) = delete;
  VirtualPeer& operator=(const VirtualPeer&) = delete;

  // Spawns the peer's training fiber.
  void start();
  // A restarted peer continues from `neighbour`'s state and step where it is behind the
  // run (behind_the_run), and a peer of a graph algorithm (rounds matched by number) at
  // the neighbour's round, as a resumed peer process does (PeerProcess::first_round).
  // Before start().
  void continue_from(const VirtualPeer& neighbour);
  // A crash (kill fault): its endpoint dies on the fabric now, and its training stops at
  // the end of the step in progress.
  void kill();
  // Gossip: the peers alive now, sorted by id (oracle membership); ignored by ranked
  // algorithms.
  void set_live_peers(const std::vector<std::string>& sorted_ids);
  // disk-full: its periodic checkpoints fail (the last one stays) while full.
  void set_disk_full(bool full) { disk_full_ = full; }
  // Its partitions: the peers it cannot talk to (empty: healed); kept for a transport
  // not built yet.
  void set_blocked(std::vector<std::string> ids);
  // Its own link from now on, a link fault with a time (none: its --link again); kept for
  // a transport not built yet. Needs --link-may-change in its arguments.
  void set_own_link(std::optional<emulation::LinkSpec> link);
  // The run's budget is spent: training ends after the step in progress, as a peer
  // process's does at its control file's stop.
  void end_training() { budget_->end(RunBudget::End::told); }

  int rank() const noexcept { return rank_; }
  const std::string& id() const noexcept { return id_; }
  bool killed() const noexcept { return killed_; }
  bool ended() const noexcept { return ended_; }
  bool gone() const noexcept { return gone_; }
  std::int64_t steps() const noexcept { return position_.step; }
  // The learning rate its schedule gives now (its last step's, once it ended).
  double learning_rate() const { return schedule_->at(position_.step); }
  // When its training loop ended (virtual time; meaningful once ended()).
  fiber::Scheduler::time_point ended_at() const noexcept { return ended_at_; }
  // Why its training failed ("" when it did not): the error, naming the peer it lost.
  const std::string& failure() const noexcept { return failure_; }
  bool diverged() const noexcept { return diverged_; }
  // Its state (parameters and buffers), as a peer's checkpoint would hold it.
  std::vector<float> state() const;
  std::span<const float> state_view() const;
  std::int64_t param_count() const { return model_->param_count(); }
  std::uint64_t bytes_sent() const;  // so far: live while it runs
  // Its state right after the step of evaluation point k, if it took that snapshot (and
  // it was not taken back yet); take_snapshot removes it.
  bool has_snapshot(std::int64_t k) const { return snapshots_.contains(k); }
  // Whether it is past evaluation point k without its snapshot: a peer resumed, or carried
  // on from a neighbour, beyond that step skips it (snapshot_due), and takes it never.
  bool skipped_snapshot(std::int64_t k) const { return next_snapshot_ > k && !snapshots_.contains(k); }
  std::vector<float> take_snapshot(std::int64_t k);
  // When it took snapshot k (before take_snapshot; the epoch of the clock otherwise).
  fiber::Scheduler::time_point snapshot_time(std::int64_t k) const {
    const auto it = snapshots_.find(k);
    return it != snapshots_.end() ? it->second.at : fiber::Scheduler::time_point{};
  }
  // The bytes it had sent when it took snapshot k (bytes_sent() for one it did not take, or
  // took back already).
  std::uint64_t sent_at_snapshot(std::int64_t k) const;
  // Its last periodic checkpoint (null before the first).
  std::shared_ptr<const VirtualCheckpoint> last_checkpoint() const { return checkpoint_; }
  std::int64_t train_examples() const { return shard_examples_; }
  // Push-sum (sgp): its ledger when its mixer stopped (push_sum_ledger.hpp); none before,
  // and for other algorithms.
  const std::optional<PushSumLedger>& push_sum() const noexcept { return push_sum_; }
  // Peer `id` ended its training after `steps` and said bye: it takes no more steps.
  void peer_left(const std::string& id, std::int64_t steps);
  // The settings it was built with, parsed from its command line.
  const PeerConfig& config() const { return cfg_; }

 private:
  void run();  // the training fiber
  void build_mixer();
  void snapshot_if_due();    // --snapshot-every, as a peer process saves them
  void checkpoint_if_due();  // --checkpoint-every (in virtual time)
  void resume_from(const VirtualCheckpoint& c);
  std::uint64_t round_of_step(std::int64_t step) const;
  TrainingHooks hooks();

  const int rank_;
  PeerConfig cfg_;
  std::string id_;
  VirtualPeerLinks links_;
  std::int64_t shard_examples_ = 0;  // its shard's size (the rows stay in the shared data set)
  std::unique_ptr<Model> model_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<LrSchedule> schedule_;
  std::unique_ptr<TrainingSession> session_;
  std::optional<EpochOrder> order_;
  TrainingPosition position_;
  std::shared_ptr<transport::ProgressEstimate> progress_;  // what its messages say and tell it
  std::unique_ptr<RunBudget> budget_;                      // ended by the run (VirtualRun)
  double shard_share_ = 1.0;                               // AlgorithmOptions::shard_share

  std::optional<topology::Topology> graph_;  // the graph algorithms' (the algorithm keeps a pointer)
  std::unique_ptr<emulation::EmulatedTransport> transport_;
  std::vector<std::string> blocked_;
  std::optional<emulation::LinkSpec> own_link_;
  bool disk_full_ = false;
  std::unique_ptr<algorithms::Mixer> mixer_;
  std::optional<PushSumLedger> push_sum_;
  bool follows_membership_ = false;
  bool killed_ = false, ended_ = false, gone_ = false, diverged_ = false;
  // Its loss, watched as a peer process watches its own (model/divergence.hpp), over
  // kWatchSteps steps at a time: a loss 10x a uniform guess's is a divergence, as one that
  // is not finite. The partner distance is left to the run's consensus distance: a peer
  // process's first reports cover seconds of steps, these would cover a few, at which the
  // distance is too small a measure.
  static constexpr int kWatchSteps = 4;
  std::optional<DivergenceWatch> watch_;
  BatchStats watched_;
  int watched_steps_ = 0;
  fiber::Scheduler::time_point ended_at_{};
  std::string failure_;
  std::uint64_t bytes_sent_ = 0;
  std::int64_t steps_per_epoch_ = 0;
  std::int64_t next_snapshot_ = 1;
  struct Snapshot {
    std::vector<float> state;
    std::uint64_t bytes = 0;              // bytes sent by then
    fiber::Scheduler::time_point at{};  // when it was taken
  };
  std::map<std::int64_t, Snapshot> snapshots_;
  std::shared_ptr<const VirtualCheckpoint> checkpoint_;
  fiber::Scheduler::time_point next_checkpoint_{};
  std::uint64_t first_round_ = 0;  // of its Mixer: a restarted peer's rounds go on from its step
};

}  // namespace hearsay::sim
