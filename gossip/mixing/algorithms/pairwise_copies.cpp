// PairwiseExchange with link copies: CHOCO-SGD's compressed exchange (link_copies.hpp says
// what each side sends and takes; pairwise.hpp who may ask whom), and the busy answer,
// whose base tells a link copy in doubt.
#include <cmath>
#include <string>

#include "gossip/mixing/algorithms/pairwise.hpp"
#include "kernels/cpu/vector.hpp"

namespace hearsay::algorithms {

void PairwiseExchange::answer_on_link(const transport::Message& request, int rank, std::span<float> params) {
  const std::string& id = request.sender();
  const double alpha = request.header().weight;
  LinkCopies::Answer answer = links_->answer(id, request, params, next_nonce());
  if (answer.refused) {
    refuse(counters_.refused_payload, "a request that does not decode: " + *answer.refused, id,
           logging::Level::warn, /*recorded=*/true);
    send_busy(rank, request, *answer.refused, /*implausible=*/true);
    return;
  }
  if (!answer.reply) {
    // It applies to a version of the link's copies we do not hold: it starts over, whole.
    ++counters_.links_restarted;
    send_busy(rank, request,
              "we hold version " + std::to_string(answer.version) + " of the link's copies, not " +
                  std::to_string(request.header().base) + "; the next exchange is whole");
    return;
  }
  if (!plausible_partner(params, answer.theirs.data())) {
    const std::string why = implausible_values();
    refuse(counters_.refused_implausible, "a request with " + why, id, logging::Level::warn,
           /*recorded=*/true);
    send_busy(rank, request, why, /*implausible=*/true);
    return;
  }
  ExchangeRecord record;
  record.round = round_;
  record.partner = id;
  record.bytes_received = request.payload().size();
  record.latency_s = 0;  // the passive side waits for nothing
  wire::Header reply;
  reply.type = wire::MessageType::params_reply;
  reply.nonce = request.header().nonce;
  reply.step = round_;
  reply.weight = alpha;
  reply.base = answer.reply->base;
  if (auto error = send_to(rank, reply, answer.reply->payload)) {
    // The asker will never take it, so neither do we: the link stays as it was, and the
    // asker, giving its request up, starts it over.
    ++counters_.send_failures;
    record.outcome = ExchangeRecord::Outcome::failed;
    record.detail = "reply not sent: " + *error;
    log_.record(std::move(record));
    return;
  }
  links_->commit_answer(id);
  record.distance = links_->mix(id, params, gamma_ * alpha);
  record.bytes_sent = answer.reply->payload.bytes().size();
  ++counters_.served;
  ++tally_.served;
  if (snapshot_) {
    snapshot_->weight += alpha;
    ++counters_.served_from_snapshot;
  }
  log_.record(std::move(record));
}

void PairwiseExchange::apply_reply_on_link(const transport::Message& reply,
                                           std::unordered_map<std::uint64_t, Outstanding>::iterator it,
                                           ExchangeRecord record, std::span<float> params) {
  const Outstanding& entry = it->second;
  const std::string& id = reply.sender();
  record.bytes_received = reply.payload().size();
  // The partner took its half in any case: refusing ours moves the network sum, as a reply
  // given up does.
  if (auto why = links_->take_reply(id, reply, entry.base)) {
    ++counters_.links_restarted;
    settle_refused(it, std::move(record), counters_.refused_payload,
                   "a reply that does not fit its link: " + *why, ExchangeRecord::Outcome::failed,
                   "refused: " + *why + "; the next exchange is whole");
    return;
  }
  if (!plausible_partner(params, links_->theirs(id).data())) {
    links_->forget(id);
    settle_refused(it, std::move(record), counters_.refused_implausible,
                   "a reply with " + implausible_values(), ExchangeRecord::Outcome::implausible,
                   "refused: " + implausible_values());
    return;
  }
  record.distance = links_->mix(id, params, gamma_ * entry.alpha);
  settle_applied(it, std::move(record));
}

void PairwiseExchange::settle_busy(const transport::Message& reply,
                                   std::unordered_map<std::uint64_t, Outstanding>::iterator it,
                                   ExchangeRecord record) {
  // Busy: the partner applied nothing, and neither do we.
  ++counters_.answered_busy;
  ++tally_.failed;
  record.outcome = ExchangeRecord::Outcome::busy;
  record.detail = "the partner was busy with an exchange of its own";
  const std::uint64_t base = it->second.base;
  if (links_ && reply.header().base == base) {
    links_->cancel(reply.sender());
  } else if (links_) {
    // It holds another version of the link's copies: both start over, whole.
    links_->forget(reply.sender());
    ++counters_.links_restarted;
    record.detail = "the partner holds version " + std::to_string(reply.header().base) +
                    " of the link's copies, not " + std::to_string(base) + "; the next exchange is whole";
  }
  log_.record(std::move(record));
  settle(it);
}

}  // namespace hearsay::algorithms
