#include "sim/divergence_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "peer/peer_config.hpp"

namespace hearsay::sim {

namespace {

std::string fixed4(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4f", v);
  return text;
}

std::string general(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", v);
  return text;
}

}  // namespace

DivergenceCheck::DivergenceCheck(int peers, int classes) : classes_(classes) {
  for (int r = 0; r < peers; ++r) peers_.push_back(Peer{DivergenceWatch(classes), std::nullopt});
}

void DivergenceCheck::observe(int rank, const nlohmann::json& record) {
  if (rank < 0 || rank >= static_cast<int>(peers_.size())) return;
  Peer& peer = peers_[static_cast<std::size_t>(rank)];
  const std::string type = record.value("type", "");
  if (type == "start") {
    // A restarted process is watched afresh; what its predecessor did stays.
    if (!peer.reported) peer.reported = peer.watch.divergence();
    peer.watch = DivergenceWatch(classes_);
  } else if (type == "metrics" && record.contains("loss")) {  // a Python peer may report none
    const auto number = [&](const char* key) {
      const auto it = record.find(key);
      // JSON has no NaN: a loss that was not finite is written as null.
      return it != record.end() && it->is_number() ? it->get<double>() : std::nan("");
    };
    peer.watch.observe(record.value("step", std::int64_t{0}), number("loss"), number("partner_distance"));
  } else if (type == "diverged" && !peer.reported) {
    Divergence d;
    d.step = record.value("step", std::int64_t{0});
    d.began_at = record.value("began_at_step", d.step);
    d.what = record.value("what", std::string("its training diverged"));
    peer.reported = d;
  }
}

std::optional<std::pair<int, Divergence>> DivergenceCheck::first_divergence() const {
  std::optional<std::pair<int, Divergence>> first;
  for (int r = 0; r < static_cast<int>(peers_.size()); ++r) {
    const Peer& peer = peers_[static_cast<std::size_t>(r)];
    const std::optional<Divergence>& d = peer.reported ? peer.reported : peer.watch.divergence();
    if (d && (!first || d->began_at < first->second.began_at)) first = std::make_pair(r, *d);
  }
  return first;
}

std::string DivergenceCheck::where_it_began() const {
  std::optional<std::pair<int, std::int64_t>> first;
  for (int r = 0; r < static_cast<int>(peers_.size()); ++r)
    if (const auto began = peers_[static_cast<std::size_t>(r)].watch.excursion_began())
      if (!first || *began < first->second) first = std::make_pair(r, *began);
  if (!first) return "";
  return " (from step " + std::to_string(first->second) + " on " + hearsay::rank_peer_id(first->first) +
         ", where its loss or partner distance began to rise)";
}

std::string DivergenceCheck::apart_verdict(const std::vector<Evaluation>& curve, bool has_final) const {
  if (!has_final || curve.empty()) return "";
  const Evaluation& last = curve.back();
  if (!(std::fabs(last.acc_avg_model - last.acc_mean_peer) > kApartMargin)) return "";
  return "apart: the peers' own models end at a mean accuracy of " + fixed4(last.acc_mean_peer) +
         " and their average at " + fixed4(last.acc_avg_model) + " (consensus distance " +
         general(last.consensus_distance) +
         "): the peers hold no common model; a smaller --consensus-step, a gentler --compress "
         "or a denser --graph brings them together";
}

std::string DivergenceCheck::drift_verdict(const std::vector<Evaluation>& curve, bool has_final) const {
  if (!has_final || curve.size() < 3) return "";
  const std::size_t n = curve.size();
  const Evaluation& last = curve[n - 1];
  const Evaluation& before = curve[n - 2];
  const Evaluation& before_that = curve[n - 3];
  const double floor = kDriftFloor * last.avg_model_sq_norm;
  const Evaluation* lowest = nullptr;      // over the second half
  const Evaluation* lowest_run = nullptr;  // over the whole run
  int later_half = 0;
  for (std::size_t i = 0; i + 2 < n; ++i) {  // the low comes before the last two rises
    const Evaluation& e = curve[i];
    if (!lowest_run || e.consensus_distance < lowest_run->consensus_distance) lowest_run = &e;
    if (e.run_epochs < last.run_epochs / 2) continue;
    ++later_half;
    if (!lowest || e.consensus_distance < lowest->consensus_distance) lowest = &e;
  }
  const double end = last.consensus_distance;
  if (!(end > before.consensus_distance && before.consensus_distance > before_that.consensus_distance))
    return "";
  // Growth is measured from the low or from the floor, whichever is larger: peers that
  // agreed to a rounding at one evaluation (a sync point, 0) give no scale to grow from.
  const auto grew = [&](const Evaluation* low, double factor) {
    return low != nullptr && end > factor * std::max(low->consensus_distance, floor);
  };
  if (grew(lowest_run, kRunawayGrowth))
    lowest = lowest_run;
  else if (later_half + 2 < kDriftEvaluations || !grew(lowest, kDriftGrowth))
    return "";
  return "drifting: the consensus distance rose from " + general(lowest->consensus_distance) + " at " +
         general(lowest->run_epochs) + " epochs to " + general(end) +
         " at the end, and was still rising: the peers move apart; a smaller --consensus-step, a "
         "gentler --compress or a denser --graph keeps them together";
}

std::string DivergenceCheck::verdict(const std::vector<Evaluation>& curve, bool has_final) const {
  if (const auto first = first_divergence()) {
    const auto& [rank, d] = *first;
    return "diverged: " + rank_peer_id(rank) + " from step " + std::to_string(d.began_at) + " (at step " +
           std::to_string(d.step) + " " + d.what + ")";
  }
  const double chance = 1.0 / static_cast<double>(classes_);
  if (has_final && !curve.empty()) {
    const Evaluation& last = curve.back();
    if (last.acc_avg_model <= chance + kChanceMargin)
      return "diverged: the averaged model ends at chance (accuracy " + fixed4(last.acc_avg_model) + ")" +
             where_it_began();
    if (last.acc_mean_peer <= chance + kChanceMargin)
      return "diverged: the peers end at chance (mean accuracy " + fixed4(last.acc_mean_peer) + ")" +
             where_it_began();
  }
  if (std::string apart = apart_verdict(curve, has_final); !apart.empty()) return apart;
  double lowest = 0;
  for (const Evaluation& e : curve) {
    // Grown a thousandfold, and past the size of the model itself: peers that differ by
    // more than their parameters are not one model any more. (Growth alone is no sign:
    // from peers that agreed to 1e-25 any training step is a "growth".)
    if (lowest > 0 && e.consensus_distance > kConsensusGrowth * lowest &&
        e.consensus_distance > e.avg_model_sq_norm)
      return "diverged: the consensus distance grew from " + general(lowest) + " to " +
             general(e.consensus_distance) + " (the averaged model's squared norm is " +
             general(e.avg_model_sq_norm) + ") by " + general(e.time_s) + " s" + where_it_began();
    if (e.consensus_distance > 0 && (lowest == 0 || e.consensus_distance < lowest))
      lowest = e.consensus_distance;
  }
  return drift_verdict(curve, has_final);
}

}  // namespace hearsay::sim
