// CHOCO-SGD's public copies kept per link, for pairwise exchanges with random partners:
// what `gossip --compress topk:1%` (randk:P%, sign, int4) mixes with (Koloskova, Stich,
// Jaggi, ICML 2019; choco.hpp is the graph form).
//
// CHOCO keeps one public copy x̂_i per peer, and every holder of it must take every change
// of it. Random partners do not hear every change, so here a copy belongs to a link: for
// each partner j, peer i holds x̂_i (its own copy, as j knows it) and x̂_j (j's copy, as it
// knows it), j holds the same two to the bit, and both hold the link's version (its
// exchanges so far). An exchange of A (who asks) with B, at weight a = γ alpha:
//
//   A: q_A = Q(x_A − x̂_A), sent as params_push with base = the link's version; kept pending.
//   B, if its version is that base: x̂_A += dec(q_A); q_B = Q(x_B − x̂_B) sent as
//      params_reply (same base); once it is sent x̂_B += dec(q_B), version + 1, and
//      x_B += a (x̂_A − x̂_B).
//   A, on the reply: x̂_A += dec(q_A), x̂_B += dec(q_B), version + 1, x_A += a (x̂_B − x̂_A).
//
// The two moves are exact negatives (both ends hold the same copies, and
// add_scaled_difference rounds alike), so the network's sum is kept; what Q left out of a
// change stays in x − x̂ and a later exchange on the link sends it (error feedback).
//
// A new link (first meeting, a restart, a link forgotten) sends whole: each side's values as
// f32 with base 0, which both take as the two copies, at version 1. A link in doubt is
// forgotten by the asker, whose next exchange on it is then whole: its request was given
// up (B may or may not have taken it), B answered without values and a base other than
// the request's (B holds another version), or the reply did not decode. B takes a whole
// request whatever it holds. A busy answer (nothing taken on either side) leaves the link
// as it is. So the two ends agree to the bit or one of them knows it must start over; the
// test in tests/test_gossip_choco.cpp drives 1,000 rounds over a lossy, reordering
// transport and compares them.
//
// At most kMaxLinks links are kept, the least recently used forgotten first (each holds two
// copies of the model): among more partners than that, most exchanges start whole and send
// what uncompressed gossip sends.
#pragma once
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gossip/mixing/compress/compressor.hpp"
#include "gossip/network/transport/message.hpp"
#include "gossip/network/transport/transport.hpp"

namespace hearsay::algorithms {

class LinkCopies {
 public:
  static constexpr std::size_t kMaxLinks = 32;

  // `spec`: a compressor of differences (compress::make_compressor; std::invalid_argument
  // for another), for n values cut into blocks at tensor_sizes.
  LinkCopies(std::string_view spec, std::uint64_t n, std::span<const std::uint64_t> tensor_sizes);

  std::string spec() const { return compressor_->spec(); }
  std::uint64_t size() const noexcept { return n_; }

  struct Outgoing {
    transport::Payload payload;
    std::uint64_t base = 0;  // the link's version it applies to; 0: whole
  };
  // The request to `peer` (A's side): the compressed change of our copy on the link, or our
  // values whole on a new link. It stays pending on the link until take_reply() or forget().
  Outgoing request(const std::string& peer, std::span<const float> x, std::uint64_t seed);

  // B's side: what to answer a request from `peer` while our values are x. Either a reply
  // to send (then commit_answer() once it was sent, which takes the exchange), or no reply
  // with `version` (what we hold: the request applies to another one, and the asker must
  // start over) or `refused` (the payload does not decode; nothing was taken).
  struct Answer {
    std::optional<Outgoing> reply;
    std::uint64_t version = 0;
    std::optional<std::string> refused;
    std::span<const float> theirs;  // the asker's copy as the request leaves it (for checks)
  };
  Answer answer(const std::string& peer, const transport::Message& request, std::span<const float> x,
                std::uint64_t seed);
  // The answer() just made was sent: the link takes it (copies and version).
  void commit_answer(const std::string& peer);

  // A's side: the reply to the request pending on the link to `peer`, sent with `base`.
  // Takes it (copies and version), or, for a reply that does not fit (another version, a
  // payload that does not decode), forgets the link and says why.
  std::optional<std::string> take_reply(const std::string& peer, const transport::Message& reply,
                                        std::uint64_t base);
  // The request pending on the link was answered busy: nothing was taken on either side.
  void cancel(const std::string& peer);
  // The link is in doubt: its next exchange is whole.
  void forget(const std::string& peer);

  // x += weight (x̂_peer − x̂_self) with the link's copies; returns ||x̂_peer − x̂_self||.
  double mix(const std::string& peer, std::span<float> x, double weight) const;

  // For tests and reports: the link's version (0: none held) and its two copies.
  std::uint64_t version(const std::string& peer) const;
  bool pending(const std::string& peer) const;  // a request of ours on it awaits its reply
  std::span<const float> mine(const std::string& peer) const;
  std::span<const float> theirs(const std::string& peer) const;
  std::size_t links() const noexcept { return links_.size(); }

 private:
  struct Link {
    std::vector<float> mine, theirs;
    std::uint64_t version = 0;       // 0: nothing held, the next exchange is whole
    transport::Payload pending;      // our request until its reply (no frame: none out)
    std::uint64_t pending_base = 0;  // the version it applies to
    std::list<std::string>::iterator used;  // in lru_
  };
  Link& link(const std::string& peer);  // created (or refreshed in lru_) on use
  const Link* find(const std::string& peer) const;
  // Adds a payload of ours to our copy: whole values replace it, a difference is added.
  void take_ours(Link& l, const transport::Payload& payload) const;
  transport::Payload encode_change(std::span<const float> x, std::span<const float> copy, std::uint64_t seed);

  std::unique_ptr<compress::Compressor> compressor_;
  std::uint64_t n_;
  std::unordered_map<std::string, Link> links_;
  std::list<std::string> lru_;  // most recently used first
  // B's answer in the making: the asker's copy as the request leaves it, and our reply.
  std::vector<float> candidate_;
  Outgoing answered_;
  std::string answered_peer_;
  std::vector<float> scratch_;
};

}  // namespace hearsay::algorithms
