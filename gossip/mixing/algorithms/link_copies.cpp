#include "gossip/mixing/algorithms/link_copies.hpp"

#include <cmath>
#include <stdexcept>

#include "gossip/network/wire/payload.hpp"
#include "kernels/cpu/vector.hpp"

namespace hearsay::algorithms {

namespace {

// What a message of the link with `base` carries: whole values to start it, else a difference.
wire::Dtype carried(std::uint64_t base) { return base == 0 ? wire::Dtype::f32 : wire::Dtype::compressed; }

}  // namespace

LinkCopies::LinkCopies(std::string_view spec, std::uint64_t n, std::span<const std::uint64_t> tensor_sizes)
    : compressor_(compress::make_compressor(spec, n, tensor_sizes)), n_(n) {}

LinkCopies::Link& LinkCopies::link(const std::string& peer) {
  if (auto it = links_.find(peer); it != links_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second.used);
    return it->second;
  }
  if (links_.size() >= kMaxLinks) {
    // The least recently used link without a request out: its partner's next exchange with
    // us starts whole (a link with a request out is kept, or its reply could not be taken).
    for (auto victim = lru_.rbegin(); victim != lru_.rend(); ++victim) {
      if (links_.at(*victim).pending.has_frame()) continue;
      links_.erase(*victim);
      lru_.erase(std::next(victim).base());
      break;
    }
  }
  lru_.push_front(peer);
  Link& l = links_[peer];
  l.used = lru_.begin();
  return l;
}

const LinkCopies::Link* LinkCopies::find(const std::string& peer) const {
  const auto it = links_.find(peer);
  return it == links_.end() ? nullptr : &it->second;
}

transport::Payload LinkCopies::encode_change(std::span<const float> x, std::span<const float> copy,
                                             std::uint64_t seed) {
  scratch_.resize(n_);
  for (std::size_t i = 0; i < n_; ++i) scratch_[i] = x[i] - copy[i];
  return transport::Payload::encoded(wire::Dtype::compressed, n_, compressor_->encode(scratch_, seed));
}

void LinkCopies::take_ours(Link& l, const transport::Payload& payload) const {
  if (payload.dtype() == wire::Dtype::f32) {
    l.mine.resize(n_);
    wire::decode_values(wire::Dtype::f32, payload.bytes(), l.mine);
  } else if (const auto refused = compressor_->add_decoded(payload.bytes(), l.mine)) {
    throw std::logic_error("gossip --compress: our own payload does not decode: " + refused->detail);
  }
}

LinkCopies::Outgoing LinkCopies::request(const std::string& peer, std::span<const float> x,
                                         std::uint64_t seed) {
  if (x.size() != n_) throw std::invalid_argument("gossip --compress: a buffer of another size");
  Link& l = link(peer);
  Outgoing out;
  out.base = l.version;
  out.payload = l.version == 0 ? transport::Payload::copy_f32(x) : encode_change(x, l.mine, seed);
  l.pending = out.payload;
  l.pending_base = out.base;
  return out;
}

LinkCopies::Answer LinkCopies::answer(const std::string& peer, const transport::Message& request,
                                      std::span<const float> x, std::uint64_t seed) {
  if (x.size() != n_) throw std::invalid_argument("gossip --compress: a buffer of another size");
  Link& l = link(peer);
  Answer a;
  a.version = l.version;
  const wire::Header& h = request.header();
  const bool whole = h.base == 0;
  if (h.dtype != carried(h.base)) {
    a.refused = "a request of " + std::string(wire::to_string(h.dtype)) + " with base " +
                std::to_string(h.base) + ": this peer exchanges " + spec() +
                " differences (f32 only to start a link); do the peers' --compress agree?";
    return a;
  }
  if (request.count() != n_) {
    a.refused = "a request of " + std::to_string(request.count()) + " values for our " + std::to_string(n_);
    return a;
  }
  if (!whole && h.base != l.version) return a;  // another version: the asker starts over
  candidate_.resize(n_);
  if (whole) {
    request.decode_into(candidate_);
  } else {
    std::copy(l.theirs.begin(), l.theirs.end(), candidate_.begin());
    if (auto why = compressor_->add_decoded(request.payload(), candidate_)) {
      a.refused = why->detail;
      return a;
    }
  }
  answered_.base = whole ? 0 : l.version;
  answered_.payload = whole ? transport::Payload::copy_f32(x) : encode_change(x, l.mine, seed);
  answered_peer_ = peer;
  a.reply = answered_;
  a.theirs = candidate_;
  return a;
}

void LinkCopies::commit_answer(const std::string& peer) {
  if (peer != answered_peer_) throw std::logic_error("LinkCopies: commit_answer without its answer");
  Link& l = link(peer);
  l.theirs.swap(candidate_);
  take_ours(l, answered_.payload);
  l.version = answered_.base == 0 ? 1 : l.version + 1;
  answered_peer_.clear();
  answered_.payload = {};
}

std::optional<std::string> LinkCopies::take_reply(const std::string& peer, const transport::Message& reply,
                                                  std::uint64_t base) {
  auto it = links_.find(peer);
  if (it == links_.end() || !it->second.pending.has_frame() || it->second.pending_base != base)
    return "a reply for a request this link no longer waits for";
  Link& l = it->second;
  const wire::Header& h = reply.header();
  std::optional<std::string> why;
  if (l.version != base) {
    why = "a reply to version " + std::to_string(base) + " of a link now at " + std::to_string(l.version);
  } else if (h.dtype != carried(base) || (base != 0 && h.base != base)) {
    why = "a reply of " + std::string(wire::to_string(h.dtype)) + " with base " + std::to_string(h.base) +
          " to a request with base " + std::to_string(base);
  } else if (reply.count() != n_) {
    why = "a reply of " + std::to_string(reply.count()) + " values";
  } else if (base == 0) {
    l.theirs.resize(n_);
    reply.decode_into(l.theirs);
  } else {
    if (auto refused = compressor_->add_decoded(reply.payload(), l.theirs))  // unchanged on a refusal
      why = refused->detail;
  }
  if (why) {
    forget(peer);
    return why;
  }
  take_ours(l, l.pending);
  l.version = base == 0 ? 1 : base + 1;
  l.pending = {};
  return std::nullopt;
}

void LinkCopies::cancel(const std::string& peer) {
  if (const auto it = links_.find(peer); it != links_.end()) {
    it->second.pending = {};
  }
}

bool LinkCopies::pending(const std::string& peer) const {
  const Link* l = find(peer);
  return l != nullptr && l->pending.has_frame();
}

void LinkCopies::forget(const std::string& peer) {
  const auto it = links_.find(peer);
  if (it == links_.end()) return;
  lru_.erase(it->second.used);
  links_.erase(it);
}

double LinkCopies::mix(const std::string& peer, std::span<float> x, double weight) const {
  const Link* l = find(peer);
  if (l == nullptr || l->version == 0) throw std::logic_error("LinkCopies::mix on a link not held");
  return std::sqrt(cpu::add_scaled_difference(x.size(), x.data(), weight, l->theirs.data(), l->mine.data()));
}

std::uint64_t LinkCopies::version(const std::string& peer) const {
  const Link* l = find(peer);
  return l == nullptr ? 0 : l->version;
}

std::span<const float> LinkCopies::mine(const std::string& peer) const {
  const Link* l = find(peer);
  return l == nullptr ? std::span<const float>{} : std::span<const float>(l->mine);
}

std::span<const float> LinkCopies::theirs(const std::string& peer) const {
  const Link* l = find(peer);
  return l == nullptr ? std::span<const float>{} : std::span<const float>(l->theirs);
}

}  // namespace hearsay::algorithms
