// SimulationRun: how a run ends. The peers are stopped, the final parameters (each
// finished peer's last checkpoint) evaluated, the totals summed, and the status says how
// it went: ok, or what failed, diverged or never fired.
#include "model/checkpoint.hpp"
#include "model/zoo.hpp"
#include "peer/layout_checkpoint.hpp"
#include "sim/simulation_run.hpp"

namespace hearsay::sim {

RunResult SimulationRun::finish() {
  result_.wall_s = seconds_since_start();
  result_.real_s = result_.startup_s + result_.wall_s;
  for (std::size_t i = 0; i < schedule_.size(); ++i) lift(i, result_.wall_s, true);  // to hear the stop
  cluster_.stop_all(std::chrono::seconds(10));
  checkpoint_watch_.look(result_.wall_s);  // the final checkpoints, as the watch saw them too
  result_.checkpoint_problems = checkpoint_watch_.problems();
  result_.checkpoint_versions_read = checkpoint_watch_.versions_read();
  std::vector<PeerParams> last = final_parameters();
  double samples = 0, bytes = 0;
  for (PeerRecord& peer : peers_) {
    read_metrics(peer);
    samples += static_cast<double>(peer.metrics.step()) * cfg_.training.batch;
    bytes += peer.metrics.bytes_sent();
    result_.shard_examples.push_back(peer.shard_examples);
    result_.peer_steps.push_back(peer.metrics.step());
  }
  if (!peers_.empty()) result_.peer_settings = peers_.front().settings;
  result_.budget = cfg_.budget;
  const bool has_final = !last.empty();
  if (has_final) worker_.submit(result_.wall_s, samples / train_count_, bytes / cfg_.peers, std::move(last));
  result_.curve = worker_.finish();
  // A run that diverged says so, also when its peers exited with an error on the way.
  if (status_.empty() || status_.starts_with("failed"))
    if (std::string diverged = divergence_.verdict(result_.curve, has_final); !diverged.empty())
      status_ = std::move(diverged);
  result_.samples_per_s = result_.wall_s > 0 ? samples / result_.wall_s : 0;
  result_.bytes_sent_per_peer = bytes / cfg_.peers;
  result_.time_to_target_s = time_to_target(result_.curve, cfg_.target_acc);
  result_.bytes_to_target_per_peer = bytes_to_target(result_.curve, cfg_.target_acc);
  for (const PeerRecord& peer : peers_) {
    const long rss = cluster_.peak_rss_kb(peer.rank);
    result_.peak_rss_kb.push_back(rss);
    result_.peak_rss_kb_max = std::max(result_.peak_rss_kb_max, rss);
  }
  if (status_.empty()) status_ = exit_status();
  report_crashes();
  // A run whose fault never came is not the experiment that was asked for.
  result_.fault_firings = fault_log_.firings();
  const std::string not_fired = fault_log_.not_fired(result_.wall_s, samples / train_count_);
  result_.status = !status_.empty() ? status_ : not_fired.empty() ? "ok" : "ok (" + not_fired + ")";
  return result_;
}

// The last checkpoint of every peer that finished its run.
std::vector<PeerParams> SimulationRun::final_parameters() {
  std::vector<PeerParams> last;
  auto model = make_model(cfg_.training.model);
  for (const PeerRecord& peer : peers_) {
    const auto& e = cluster_.exit_of(peer.rank);
    if (peer.killed || !e || e->signalled || e->code != 0) continue;
    if (external_) {  // a model hearsay does not know: its own tensors (layout_checkpoint.hpp)
      try {
        auto params = read_layout_checkpoint_state(checkpoint_path(peer.files.checkpoint_dir));
        if (static_cast<std::int64_t>(params.size()) != external_->count())
          throw std::runtime_error("it holds " + std::to_string(params.size()) + " values, the model has " +
                                   std::to_string(external_->count()));
        last.push_back({peer.rank, std::move(params)});
      } catch (const std::exception& ex) {
        result_.checkpoint_problems.push_back(peer.id +
                                              " finished, but its checkpoint does not load: " + ex.what());
      }
      continue;
    }
    try {
      read_checkpoint(checkpoint_path(peer.files.checkpoint_dir), *model);
      const auto p = model->state();
      last.push_back({peer.rank, std::vector<float>(p.begin(), p.end())});
    } catch (const std::exception& ex) {
      logging::warn(std::string("sim: ") + ex.what());
      result_.checkpoint_problems.push_back(peer.id +
                                            " finished, but its checkpoint does not load: " + ex.what());
    }
  }
  return last;
}

// A peer that crashed left its stack in its log, which a test's or a job's temporary
// directory may not keep: say it where the run's own output goes.
void SimulationRun::report_crashes() const {
  for (const PeerRecord& peer : peers_) {
    const auto& e = cluster_.exit_of(peer.rank);
    if (peer.killed || !e || !e->signalled) continue;
    if (const std::string report = crash_report_in(peer.files.log); !report.empty())
      logging::error("sim: " + peer.id + " crashed; from " + peer.files.log.string() + ":\n" + report);
  }
}

// "failed: rankR exit 1: WHY" for the first peer that ended badly (and was not killed by a
// fault), else "". First in time: a peer that fails because another did (RelaySGD's cut tree,
// whose peers fail one after the other) is not the one to name. A crash is never such a
// consequence but a bug of its own: one that came later is named after the first failure.
std::string SimulationRun::exit_status() const {
  const PeerRecord* first = nullptr;
  for (const PeerRecord& peer : peers_) {
    const auto& e = cluster_.exit_of(peer.rank);
    if (peer.killed || !e || (!e->signalled && e->code == 0)) continue;
    if (first == nullptr || e->at < cluster_.exit_of(first->rank)->at) first = &peer;
  }
  if (first == nullptr) return "";
  const std::string why = last_error_line(first->files.log);
  std::string status = "failed: " + first->id + " " + cluster_.exit_of(first->rank)->describe() +
                       (why.empty() ? "" : ": " + why);
  for (const PeerRecord& peer : peers_) {
    const auto& e = cluster_.exit_of(peer.rank);
    if (&peer == first || peer.killed || !e || !e->signalled) continue;
    if (const std::string crash = last_error_line(peer.files.log); crash.starts_with("crashed: "))
      status += "; then " + peer.id + " " + e->describe() + ": " + crash;
  }
  return status;
}

}  // namespace hearsay::sim
