// The interface every mixing algorithm implements, and what they share: options, the
// peers of a run, and the per-exchange log that feeds the simulator's consensus metrics.
//
// An algorithm works on one flat parameter buffer (the model's, or a copy of it owned by
// the communication thread, see mixer.hpp) over the transport interface, so it runs the
// same over the in-process transport in tests and over ZeroMQ between processes. It
// never sees layers; the model never sees sockets.
//
// Threading: one Algorithm object is driven by one thread at a time (the communication
// thread): mix() and serve() are not called concurrently.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gossip/mixing/compress/compressor.hpp"
#include "gossip/mixing/topology/topology.hpp"
#include "gossip/network/transport/transport.hpp"
#include "gossip/network/wire/header.hpp"

namespace hearsay::algorithms {

using transport::Clock;

// Knobs shared by the algorithms (command line: --gossip-every, --fanout,
// --round-timeout, --compress, --overlap). The round timeout is the cap of the deadlines
// the algorithms learn from what they observe (learnt_timeout.hpp), and their deadline
// until they have observed enough.
struct PartnerMemory;  // partner_timing.hpp

struct AlgorithmOptions {
  std::uint64_t gossip_every = 1;  // H: local steps between two communication rounds
  int fanout = 1;                  // k: partners per round (gossip)
  Clock::duration round_timeout = std::chrono::seconds(2);
  wire::Dtype compress = wire::Dtype::f32;  // dtype of parameter payloads on the wire
  // --compress as a compressor of differences (topk:P%, randk:P%, sign, int4): dpsgd then
  // runs CHOCO-SGD (choco.hpp); powergossip:R: dpsgd runs PowerGossip (power_gossip.hpp);
  // powersgd:R: allreduce runs PowerSGD (powersgd.hpp).
  // `compress` then stays f32. Empty: values in `compress`.
  std::string compressor;
  double consensus_step = 0;  // CHOCO's and PowerGossip's γ (--consensus-step); 0: the default
  // dpsgd's CHOCO (--lookahead): the peer trains at κ of a gossip step over the copies,
  // not at its CHOCO iterate (choco.hpp).
  bool lookahead = true;
  // The model's tensors in buffer order (sign's and int4's blocks, PowerSGD's matrices);
  // empty: none known.
  std::vector<compress::TensorShape> tensors;
  // The optimizer's momentum when the algorithm applies it to the agreed update instead of
  // each peer's optimizer to its own gradients (PowerSGD: powersgd.hpp); the peer's
  // optimizer then runs without momentum. 0: the optimizer keeps its momentum.
  double momentum = 0;
  bool nesterov = false;
  // --momentum-kind quasi-global: the Mixer runs `momentum` over the model's change across
  // rounds, mixing included (quasi_global_momentum.hpp), over the first momentum_values
  // numbers of the buffer (the parameters; 0: all of it).
  bool quasi_global_momentum = false;
  std::size_t momentum_values = 0;
  bool overlap = false;                     // apply a round's result one step late
  bool always_start_round = true;           // gossip; false: no round of our own after a partner averaged with us
  std::uint64_t seed = 1;                   // partner choice (gossip, adpsgd)
  topology::WeightScheme weights = topology::WeightScheme::uniform;
  // This peer's shard over the mean shard (shard x world / training set), with
  // --average-over examples: the Mixer scales the peer's local steps by it (mixer.hpp), so
  // that every example of the training set weighs alike whatever the split, although every
  // peer takes the same steps per epoch (a small shard's examples come round more often).
  // 1 for equal shards and with --average-over peers.
  double shard_share = 1.0;
  // What this peer's earlier algorithms learnt about partners' round trips, and which they
  // left out (gossip, adpsgd); shared with the next one. Null: learn from nothing.
  std::shared_ptr<PartnerMemory> partner_memory;
};

// Who takes part: ids indexed by rank (ranks come from --rank/--world), and our rank.
struct PeerSet {
  std::vector<std::string> ids;
  int self = 0;
  const std::string& id_of(int rank) const { return ids.at(static_cast<std::size_t>(rank)); }
  int size() const noexcept { return static_cast<int>(ids.size()); }
  // The rank of a peer id, or -1.
  int rank_of(std::string_view id) const;
};

// One exchange with one partner.
struct ExchangeRecord {
  // implausible: the partner's values were refused as garbage (plausible_partner()).
  // busy: one side was in an exchange of its own and answered "busy" (gossip's pairwise
  // exchanges never overlap); routine on a healthy run, unlike failed.
  enum class Outcome { ok, timed_out, failed, implausible, busy };
  std::uint64_t round = 0;
  std::string partner;
  Outcome outcome = Outcome::ok;
  std::uint64_t bytes_sent = 0;      // payload bytes we sent to the partner
  std::uint64_t bytes_received = 0;  // payload bytes we received from it
  double latency_s = 0;              // our send (or request) to the partner's data arriving
  double distance = -1;              // ||x_self - x_partner||_2 before mixing; -1 when nothing arrived
  std::string detail;                // why it failed, when it did
};
std::string_view to_string(ExchangeRecord::Outcome outcome);

// Thread-safe log of exchanges: the algorithm appends, metrics drain it.
class ExchangeLog {
 public:
  struct Totals {
    std::uint64_t ok = 0, timed_out = 0, failed = 0, implausible = 0, busy = 0;
    std::uint64_t bytes_sent = 0, bytes_received = 0;
    Totals& operator+=(const Totals& o) {
      ok += o.ok;
      busy += o.busy;
      timed_out += o.timed_out;
      failed += o.failed;
      implausible += o.implausible;
      bytes_sent += o.bytes_sent;
      bytes_received += o.bytes_received;
      return *this;
    }
  };
  void record(ExchangeRecord r);
  // A message refused before any exchange began (from outside the peer set, malformed):
  // counted in totals().failed, with no record.
  void count_refusal();
  // Records since the last drain, oldest first (at most kMaxKept are kept).
  std::vector<ExchangeRecord> drain();
  // Totals since construction (not reset by drain).
  Totals totals() const;
  static constexpr std::size_t kMaxKept = 100000;

 private:
  mutable std::mutex mutex_;
  std::vector<ExchangeRecord> records_;
  Totals totals_;
};

// Whether a partner's values can be a model like ours, and not garbage or a model that blew
// up: their L2 norm is at most kImplausibleNorm times ours, or times sqrt(n) (a root mean
// square of 1 per value) for a model nearer 0 than that.
// Finite values pass the transport's checks, and one partner's push of 1e30s, averaged in,
// ended the peer ("the loss became nan"); a diverged partner would drag it along as well.
inline constexpr double kImplausibleNorm = 100.0;
bool plausible_partner(std::span<const float> ours, const float* theirs) noexcept;

// What one mix() call did.
struct RoundResult {
  int exchanged = 0;  // partners whose data was mixed in
  int timed_out = 0;  // partners that missed the round deadline
  int failed = 0;     // partners that broke (PeerError)
};

class Algorithm {
 public:
  virtual ~Algorithm() = default;
  Algorithm(const Algorithm&) = delete;
  Algorithm& operator=(const Algorithm&) = delete;

  // Its name in registered_algorithms(), as --algo takes it.
  virtual std::string_view name() const = 0;
  // One communication round on params (all peers' buffers have the same size): sends,
  // receives and mixes in place. Returns within about one round deadline for gossip
  // algorithms; allreduce throws transport::PeerError naming a lost peer instead.
  // round counts communication rounds from 0 and must increase by one per call.
  virtual RoundResult mix(std::span<float> params, std::uint64_t round) = 0;
  // Answers partners' requests until the deadline without starting a round of our own
  // (passive AD-PSGD peers, gossip partners between their rounds). params may change.
  // The default receives nothing and returns at once. Mixer calls serve() between
  // rounds only when serves_between_rounds() is true.
  virtual void serve(std::span<float> params, Clock::time_point deadline);
  virtual bool serves_between_rounds() const noexcept { return false; }
  // Asked by Mixer at every H-th step, while no round runs: whether to start a round
  // now (true) or skip this one. Gossip skips it when a partner averaged with us since
  // the previous ask (!options().always_start_round); the others always run.
  virtual bool round_needed() { return true; }
  // Exchanges this peer started or answered whose other half has not settled yet
  // (pairwise algorithms); 0 for the others. Until every peer's is 0 the network's sum
  // is not yet what mixing conserves. Safe from any thread.
  virtual std::size_t outstanding() const noexcept { return 0; }
  // The run's peers changed (members came or went): `peers` replaces peers(). Called on
  // the communication thread between rounds (Mixer::set_peers), never during mix() or
  // serve(); requests in flight and what was learnt about partners are kept. Algorithms
  // that mix with whoever is alive (AlgorithmTraits::follows_membership: gossip) take any
  // set that holds this peer. The others mix over the fixed ranks of --world, a set that
  // never changes (a lost peer is theirs to notice through the transport: all-reduce
  // fails naming it, the others leave it out of their rounds): the default takes the set
  // it has and throws std::invalid_argument for another, leaving peers() as it was.
  virtual void set_peers(PeerSet peers);

  // The training thread's compute time between two rounds (gossip_every local steps,
  // what it waited for rounds excluded), as the Mixer measures it; zero until known.
  // Algorithms that need not wait for anyone bound a round's wait by it
  // (learnt_timeout.hpp). Safe from any thread.
  Clock::duration compute_per_round() const noexcept {
    return Clock::duration(compute_per_round_.load(std::memory_order_relaxed));
  }
  void set_compute_per_round(Clock::duration d) noexcept {
    compute_per_round_.store(d.count(), std::memory_order_relaxed);
  }

  ExchangeLog& exchanges() noexcept { return log_; }
  transport::Transport& transport() noexcept { return transport_; }
  const PeerSet& peers() const noexcept { return peers_; }
  const AlgorithmOptions& options() const noexcept { return options_; }

 protected:
  // Throws std::invalid_argument when peers.self is not a rank of peers.
  Algorithm(transport::Transport& transport, PeerSet peers, AlgorithmOptions options);
  transport::Transport& transport_;
  PeerSet peers_;
  AlgorithmOptions options_;
  ExchangeLog log_;

 private:
  std::atomic<Clock::rep> compute_per_round_{0};
};

// Everything make_algorithm needs.
struct AlgorithmSetup {
  std::string name;  // a name of registered_algorithms() (registry.hpp)
  transport::Transport* transport = nullptr;
  PeerSet peers;
  // The graph for dpsgd, sgp, adpsgd and local (ranks = peers.ids indices); ignored by
  // gossip (random live partners) and allreduce (a ring by rank).
  const topology::Topology* graph = nullptr;
  AlgorithmOptions options;
};
// Builds the registered algorithm of setup.name (registry.cpp, where it is defined).
// std::invalid_argument naming the valid algorithms for an unknown name, or saying
// what is missing (no graph for a graph algorithm, graph size != number of peers).
std::unique_ptr<Algorithm> make_algorithm(const AlgorithmSetup& setup);
// Throws std::invalid_argument unless the graph has one vertex per peer of the run.
void check_graph_matches(std::string_view algorithm, const topology::Topology& graph, int peers);

// ||a - b||_2 in double.
double l2_distance(std::span<const float> a, std::span<const float> b);

// Values [offset, offset + values.size()) of a mixed buffer of `total` values (0: the
// values are the whole buffer) as options.compress puts them on the wire: int8 in blocks
// cut at options.tensors (wire::int8_blocks), when those tile the buffer. Not f32 (the
// callers borrow or copy f32 values without encoding).
transport::Payload encode_params(const AlgorithmOptions& options, std::span<const float> values,
                                 std::size_t offset = 0, std::size_t total = 0);

}  // namespace hearsay::algorithms
