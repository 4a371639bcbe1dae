#include "peer/metrics.hpp"

#include <charconv>

#include <cmath>
#include <cstdio>
#include <string_view>

#include "peer/peer_config.hpp"

namespace hearsay {

nlohmann::json to_json(const PeerMetrics& m) {
  nlohmann::json dropped = nlohmann::json::object();
  for (std::size_t r = 0; r < wire::kDropReasonCount; ++r)
    dropped[std::string(wire::to_string(static_cast<wire::DropReason>(r)))] = m.dropped[r];
  return {{"type", "metrics"},
          {"peer", m.peer_id},
          {"algo", m.algo},
          {"time_s", m.time_s},
          {"step", m.step},
          {"epoch", m.epoch},
          {"loss", m.loss},
          {"train_acc", m.train_acc},
          {"samples_per_s", m.samples_per_s},
          {"bytes_sent", m.bytes_sent},
          {"bytes_received", m.bytes_received},
          {"exchanges_ok", m.exchanges_ok},
          {"exchanges_timed_out", m.exchanges_timed_out},
          {"exchanges_busy", m.exchanges_busy},
          {"exchanges_refused", m.exchanges_refused},
          {"exchanges_implausible", m.exchanges_implausible},
          {"partner_distance", m.partner_distance},
          {"live_members", m.live_members},
          {"checkpoints_written", m.checkpoints_written},
          {"checkpoint_failures", m.checkpoint_failures},
          {"dropped", std::move(dropped)}};
}

namespace {

// A label value with the escapes the exposition format requires (\\, \" and \n).
std::string label_value(std::string_view v) {
  std::string out;
  for (const char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// Prometheus spells non-finite values NaN, +Inf and -Inf.
std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

void series(std::string& out, std::string_view name, std::string_view type, std::string_view help,
            const std::string& labels, double value) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
  out += name;
  out += labels;
  out += ' ';
  out += number(value);
  out += '\n';
}

}  // namespace

std::string to_prometheus(const PeerMetrics& m) {
  const std::string labels = "{peer=\"" + label_value(m.peer_id) + "\",algo=\"" + label_value(m.algo) + "\"}";
  std::string out;
  const auto d = [](auto v) { return static_cast<double>(v); };
  series(out, "hearsay_uptime_seconds", "gauge", "Seconds since the peer started.", labels, m.time_s);
  series(out, "hearsay_step", "gauge", "Optimizer steps taken.", labels, d(m.step));
  series(out, "hearsay_epoch", "gauge", "Current epoch (from 1).", labels, d(m.epoch));
  series(out, "hearsay_train_loss", "gauge", "Mean training loss over the last interval.", labels, m.loss);
  series(out, "hearsay_train_accuracy", "gauge", "Training accuracy over the last interval.", labels,
         m.train_acc);
  series(out, "hearsay_samples_per_second", "gauge", "Training samples per second over the last interval.",
         labels, m.samples_per_s);
  series(out, "hearsay_sent_bytes_total", "counter", "Bytes of parameter messages sent.", labels,
         d(m.bytes_sent));
  series(out, "hearsay_received_bytes_total", "counter", "Bytes of parameter messages received.", labels,
         d(m.bytes_received));
  series(out, "hearsay_exchanges_ok_total", "counter", "Exchanges with partners that completed.", labels,
         d(m.exchanges_ok));
  series(out, "hearsay_exchanges_timed_out_total", "counter", "Exchanges a partner did not answer in time.",
         labels, d(m.exchanges_timed_out));
  series(out, "hearsay_exchanges_busy_total", "counter",
         "Exchange requests answered busy, either way: one side was in an exchange of its own (routine).",
         labels, d(m.exchanges_busy));
  series(out, "hearsay_exchanges_refused_total", "counter",
         "Exchanges that failed, and messages refused or dropped (a lossy link, a firewall, a stranger).", labels,
         d(m.exchanges_refused));
  series(out, "hearsay_exchanges_implausible_total", "counter",
         "Partners' values refused as garbage or a model that blew up (norm over 100 times ours).", labels,
         d(m.exchanges_implausible));
  series(out, "hearsay_partner_distance", "gauge",
         "Mean L2 parameter distance to partners over the last interval.", labels, m.partner_distance);
  series(out, "hearsay_live_members", "gauge", "Live members of the run, this peer included.", labels,
         d(m.live_members));
  series(out, "hearsay_checkpoints_written_total", "counter", "Checkpoints written.", labels,
         d(m.checkpoints_written));
  series(out, "hearsay_checkpoint_failures_total", "counter",
         "Checkpoint writes that failed (a full disk, a file-size limit); the previous checkpoint stays.",
         labels, d(m.checkpoint_failures));
  // One family, a sample per reason (every reason, zeros included: a series that appears
  // only once it is non-zero breaks rate() in Prometheus).
  out +=
      "# HELP hearsay_dropped_messages_total Messages the transport dropped, by reason.\n"
      "# TYPE hearsay_dropped_messages_total counter\n";
  for (std::size_t r = 0; r < wire::kDropReasonCount; ++r) {
    out += "hearsay_dropped_messages_total";
    out += labels.substr(0, labels.size() - 1) + ",reason=\"" +
           std::string(wire::to_string(static_cast<wire::DropReason>(r))) + "\"}";
    out += ' ' + number(d(m.dropped[r])) + '\n';
  }
  return out;
}

namespace {
// The float as the double its shortest text reads as.
double as_given(float v) {
  char text[32];
  const auto end = std::to_chars(text, text + sizeof text, v).ptr;
  double d = 0;
  std::from_chars(text, end, d);
  return d;
}
}  // namespace

nlohmann::json epochs_json(double epochs) {
  if (epochs == std::floor(epochs) && std::abs(epochs) < 1e15) return static_cast<std::int64_t>(epochs);
  return epochs;
}

nlohmann::json settings_record(const PeerConfig& cfg) {
  const auto& t = cfg.train;
  const auto& m = cfg.mixing;
  return {{"lr", as_given(t.lr)},
          {"momentum", as_given(t.momentum)},
          {"weight_decay", as_given(t.weight_decay)},
          {"nesterov", t.nesterov},
          {"optimizer", t.optimizer},
          {"lr_schedule", t.lr_schedule},
          {"budget", cfg.budget.kind},
          {"gossip_every", m.gossip_every},
          {"fanout", m.fanout},
          {"compress", m.compress},
          {"overlap", m.overlap},
          {"bn_stats", m.bn_stats}};
}

}  // namespace hearsay
