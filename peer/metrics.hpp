// What a peer reports about itself: one snapshot type, written as a JSON metrics line,
// as Prometheus text for /metrics and as JSON for /status.
//
// Counters (bytes, exchanges) are totals since the peer started; gauges (loss, rates,
// distance, members) are as of the snapshot. Prometheus names follow its conventions:
// a `hearsay_` prefix, `_total` on counters, base units (bytes, seconds).
#pragma once
#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "gossip/network/wire/header.hpp"

namespace hearsay {

struct PeerMetrics {
  std::string peer_id;
  std::string algo;
  double time_s = 0;  // since the peer started
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  double loss = 0;           // mean training loss over the last logging interval
  double train_acc = 0;      // training accuracy over the last logging interval
  double samples_per_s = 0;  // over the last logging interval
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
  std::uint64_t exchanges_ok = 0;
  std::uint64_t exchanges_timed_out = 0;
  std::uint64_t exchanges_busy = 0;         // a partner, or this peer, was in an exchange of its own
  std::uint64_t exchanges_refused = 0;      // failed exchanges and messages refused or dropped
  std::uint64_t exchanges_implausible = 0;  // of which partners' values refused as no model like ours
  std::array<std::uint64_t, wire::kDropReasonCount> dropped{};  // messages the transport dropped, by reason
  double partner_distance = 0;    // mean L2 distance to partners over the interval
  std::int64_t live_members = 0;  // including this peer
  std::uint64_t checkpoints_written = 0;
  std::uint64_t checkpoint_failures = 0;  // writes that failed (a full disk): the previous one stays
};

// The JSON metrics line (one object; `type` = "metrics").
nlohmann::json to_json(const PeerMetrics& m);

struct PeerConfig;  // peer_config.hpp
// The training and mixing settings a peer runs with, for its "start" record and the
// simulator's summary: floats as the shortest text that reads back to the same float
// (2e-07, not 1.9999999494757503e-07), so that a record shows the value as it was given.
nlohmann::json settings_record(const PeerConfig& cfg);
// --epochs for a record: an integer when it is one (2), else the number (0.37).
nlohmann::json epochs_json(double epochs);
// Prometheus text exposition format 0.0.4, every series labelled with the peer id.
std::string to_prometheus(const PeerMetrics& m);

}  // namespace hearsay
