#include "peer/watch_status.hpp"

#include <cmath>
#include <nlohmann/json.hpp>

namespace hearsay::watch {

namespace {

std::optional<double> number(const nlohmann::json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_number()) return std::nullopt;
  const double v = it->get<double>();
  return std::isfinite(v) ? std::optional<double>(v) : std::nullopt;
}

std::string text(const nlohmann::json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

bool flag(const nlohmann::json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_boolean() && it->get<bool>();
}

// A count: a non-negative number, else 0.
std::uint64_t count(const nlohmann::json& object, const char* key) {
  const auto v = number(object, key);
  return v && *v > 0 && *v < 1.8e19 ? static_cast<std::uint64_t>(*v) : 0;
}

std::vector<Member> members_of(const nlohmann::json& status) {
  std::vector<Member> out;
  const auto it = status.find("members");
  if (it == status.end() || !it->is_array()) return out;
  for (const auto& m : *it) {
    if (!m.is_object() || text(m, "id").empty()) continue;
    out.push_back({text(m, "id"), text(m, "address"), text(m, "state"), flag(m, "left"), flag(m, "self")});
  }
  return out;
}

}  // namespace

std::optional<PeerStatus> parse_status(std::string_view body, std::string& error) {
  const nlohmann::json doc = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    error = doc.is_discarded() ? "bad reply: not JSON" : "bad reply: JSON, but no object";
    return std::nullopt;
  }
  const auto metrics = doc.find("metrics");
  if (metrics == doc.end() || !metrics->is_object()) {
    error = "bad reply: no \"metrics\" in it (is this a hearsay peer's /status?)";
    return std::nullopt;
  }
  const nlohmann::json& m = *metrics;
  PeerStatus s;
  s.run = text(doc, "run");
  s.state = text(doc, "state");
  s.epochs = number(doc, "epochs");
  s.test_acc = number(doc, "test_acc");
  s.test_loss = number(doc, "test_loss");
  s.peer = text(m, "peer");
  s.time_s = number(m, "time_s");
  s.loss = number(m, "loss");
  s.train_acc = number(m, "train_acc");
  s.samples_per_s = number(m, "samples_per_s");
  s.partner_distance = number(m, "partner_distance");
  s.step = static_cast<std::int64_t>(count(m, "step"));
  s.epoch = static_cast<std::int64_t>(count(m, "epoch"));
  s.bytes_sent = count(m, "bytes_sent");
  s.bytes_received = count(m, "bytes_received");
  const auto dropped = m.find("dropped");
  if (dropped != m.end() && dropped->is_object())
    for (const auto& [reason, n] : dropped->items())
      if (n.is_number_unsigned()) s.dropped += n.get<std::uint64_t>();
  s.members = members_of(doc);
  return s;
}

void PeerTrack::update(const HttpReply& reply, Clock::time_point now) {
  std::string error = reply.error;
  std::optional<PeerStatus> status;
  if (reply.ok()) status = parse_status(reply.body, error);
  answering_ = status.has_value();
  bad_reply_ = !answering_ && (reply.answered || error.rfind("bad reply", 0) == 0);
  error_ = answering_ ? std::string() : error;
  if (!since_) since_ = now;
  if (!answering_) {
    step_rate_.reset();
    return;
  }
  step_rate_.reset();
  if (last_ && last_->peer == status->peer && last_->time_s && status->time_s &&
      *status->time_s > *last_->time_s && status->step >= last_->step)
    step_rate_ = static_cast<double>(status->step - last_->step) / (*status->time_s - *last_->time_s);
  last_ = std::move(status);
  since_ = now;
}

double PeerTrack::silent_s(Clock::time_point now) const {
  return since_ ? std::chrono::duration<double>(now - *since_).count() : 0.0;
}

std::map<std::string, Verdict> verdicts(const std::vector<const PeerTrack*>& tracks) {
  std::map<std::string, Verdict> out;
  for (const PeerTrack* track : tracks) {
    if (!track->answering()) continue;
    for (const Member& m : track->last()->members) {
      if (m.self || m.id == track->last()->peer) continue;
      Verdict& v = out[m.id];
      if (m.left)
        ++v.left;
      else if (m.state == "dead")
        ++v.dead;
      else if (m.state == "suspect")
        ++v.suspect;
      else if (m.state == "alive")
        ++v.alive;
    }
  }
  return out;
}

std::string verdict_text(const Verdict& v, bool with_alive) {
  std::vector<std::string> parts;
  if (v.dead > 0) parts.push_back("dead per " + std::to_string(v.dead));
  if (v.suspect > 0) parts.push_back("suspect per " + std::to_string(v.suspect));
  if (v.left > 0) parts.push_back("said bye per " + std::to_string(v.left));
  if (with_alive && v.alive > 0) parts.push_back("alive per " + std::to_string(v.alive));
  if (parts.empty()) return "";
  int last_count = v.alive;
  if (!(with_alive && v.alive > 0)) last_count = v.left > 0 ? v.left : v.suspect > 0 ? v.suspect : v.dead;
  std::string out;
  for (const std::string& part : parts) out += (out.empty() ? "" : ", ") + part;
  return out + (last_count == 1 ? " peer" : " peers");
}

std::string derive_state(const PeerTrack& track, const Verdict* verdict) {
  if (track.answering()) {
    const PeerStatus& s = *track.last();
    if (!s.state.empty()) return s.state;
    return s.step > 0 ? "training" : "starting";
  }
  if (track.bad_reply()) return "bad reply";
  const bool said_bye = verdict != nullptr && verdict->left > 0 && verdict->left >= verdict->dead;
  if (said_bye || (track.ever_answered() && track.last()->state == "ending")) return "ended";
  return "no answer";
}

Partners partners_of(const PeerStatus& status) {
  Partners p;
  for (const Member& m : status.members) {
    if (m.self || m.id == status.peer) continue;
    if (m.left) continue;  // gone for good: no partner any more
    ++p.known;
    if (m.state == "alive") ++p.alive;
  }
  return p;
}

}  // namespace hearsay::watch
