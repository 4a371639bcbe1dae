// Ring all-reduce: the centralized baseline the gossip algorithms are compared against.
// Every peer ends a round with the exact elementwise sum of all peers' buffers (mix():
// the average), identical on every peer, at the price of needing every peer alive.
//
// The ring is by rank: rank r sends to r+1 and receives from r-1 (mod n). A buffer of S
// elements is cut into n consecutive segments of floor(S/n) elements, the first S mod n
// of them one longer (sizes below n leave the last segments empty). Reduce-scatter: in
// ring step t = 0..n-2 rank r sends segment r-t and adds the incoming segment r-t-1 into
// its buffer, so after n-1 steps it holds the full sum of segment r+1. All-gather: in
// step t = n-1..2n-3 it sends the finished segment r+1-(t-n+1) and copies the incoming
// one over its own. Segments travel in chunks of at most chunk_elements elements, and a
// chunk is forwarded as soon as it is reduced (pipelining): a peer never waits for a
// whole segment before passing its first part on.
//
// On the wire (type allreduce_chunk): step = round * 2n + t identifies round and ring
// step, offset = the chunk's first element in the flat buffer, count its length, payload
// the chunk's values in options.compress. A receiver takes its predecessor's chunks of
// each step in offset order, and refuses (throws) a chunk that does not start where the
// previous one ended or runs past the segment: a hostile or mismatched peer cannot write
// outside the segment it is owed. With compression (f16, bf16, int8) every
// reduce-scatter hop rounds the partial sum to that dtype, so the result is not the
// exact sum; the all-gather forwards the owner's encoded bytes unchanged and the owner
// keeps the decoded values itself, so all peers still end with identical values.
//
// Failure. An all-reduce cannot finish without every peer. A wait that sees no progress
// (no chunk arriving, no chunk leaving) for options.round_timeout, or a PeerError from
// the transport, starts a probe: every other peer is pinged at once, with one shared
// deadline of half the round timeout (the transport answers pings itself, so a peer
// that is alive but stuck behind a dead one still answers). A peer that does not answer
// is named in a transport::PeerError "all-reduce round R cannot finish: peer X is not
// answering (...)"; the one nearest upstream when several are silent. When every peer
// answers a PeerError is taken to be transient and the round goes on (a peer that said
// bye starts no probe: it left after its last round, whose chunks may still be on their
// way, so the progress deadline decides); a timeout with
// every peer answering means some peer stopped taking part without dying, which pings
// cannot pin down: the PeerError (no_reply) then names the predecessor we were waiting
// on and says so. A peer throws within 1.5 round timeouts of the failure (2 at most).
// The probe needs the transport connected to every peer of the run; a transport not
// connected to its successor fails the round at once (PeerError unknown_peer).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gossip/mixing/algorithms/algorithm.hpp"
#include "gossip/mixing/algorithms/mailbox.hpp"

namespace hearsay::algorithms {

class RingAllReduce final : public Algorithm {
 public:
  // 64Ki floats (256 KiB): large enough that per-message costs vanish, small enough that
  // a ring of many peers is pipelined even for a LeNet-sized buffer.
  static constexpr std::size_t kDefaultChunkElements = std::size_t{64} * 1024;

  // std::invalid_argument for an empty or inconsistent PeerSet (self out of range, ids
  // not unique, ids[self] not the transport's id), chunk_elements == 0, or a compress
  // dtype that is not f32, f16, bf16 or int8.
  RingAllReduce(transport::Transport& transport, PeerSet peers, AlgorithmOptions options,
                std::size_t chunk_elements = kDefaultChunkElements);

  std::string_view name() const override { return "allreduce"; }
  // sum(), then divides every element by the number of peers.
  RoundResult mix(std::span<float> params, std::uint64_t round) override;
  // Replaces data with the elementwise sum over all peers (the same size on every peer).
  // round must be larger than any round before (std::invalid_argument otherwise); every
  // peer calls sum (or mix) with the same round. Throws transport::PeerError naming a
  // dead peer as described above, std::runtime_error for a chunk that breaks the rules.
  void sum(std::span<float> data, std::uint64_t round);

  std::size_t chunk_elements() const noexcept { return chunk_elements_; }

 private:
  struct Round;
  struct Segment {
    std::size_t begin = 0, end = 0;
  };
  Segment segment(std::size_t size, int index) const;
  void run_ring(std::span<float> data, Round& round);
  void receive_step(std::span<float> data, Round& round, int ring_step);
  transport::Message await_chunk(Round& round, std::uint64_t step, std::size_t offset);
  // Sends queued chunks until the successor pushes back; true when the queue is empty.
  bool flush(Round& round);
  void queue_send(Round& round, std::uint64_t step, std::size_t offset, transport::Payload payload);
  // A PeerError while waiting: fatal for a missing connection to the successor, else
  // probe_after decides.
  void on_peer_error(Round& round, const transport::PeerError& error);
  // Probes the other peers after error (nullptr: a timeout); throws PeerError naming a
  // dead peer, or returns when every peer answered.
  void probe_after(Round& round, const transport::PeerError* error);
  [[noreturn]] void fail_stalled(Round& round, const std::string& waiting_for);
  [[noreturn]] void fail(Round& round, const transport::PeerError& error, ExchangeRecord::Outcome outcome);
  void record(const Round& round, ExchangeRecord::Outcome outcome, std::string detail);
  void discard_stale(std::uint64_t step_base);

  std::size_t chunk_elements_;
  int n_;
  int rank_;
  std::string successor_;
  std::string predecessor_;
  Mailbox mailbox_;
  std::vector<float> scratch_;  // one incoming chunk, decoded before it is added
  std::optional<std::uint64_t> last_round_;
  std::uint64_t probe_nonce_;
};

}  // namespace hearsay::algorithms
