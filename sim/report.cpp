#include "sim/report.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "base/atomic_file.hpp"
#include "peer/metrics.hpp"

namespace hearsay::sim {
namespace {

nlohmann::json optional_number(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// A field of the run's final evaluation, or null without one.
nlohmann::json final_value(const RunResult& r, double Evaluation::*field) {
  const Evaluation* e = r.final_evaluation();
  return e ? nlohmann::json(e->*field) : nlohmann::json(nullptr);
}

// A field of the run's final evaluation for the table, or "-" without one.
std::string final_text(const RunResult& r, double Evaluation::*field) {
  const Evaluation* e = r.final_evaluation();
  return e ? fixed(e->*field, 4) : "-";
}

// A float flag as it was written: 0.1, not the double nearest the float (0.10000000149011612).
double as_given(float v) {
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::strtod(std::string(buf, end).c_str(), nullptr) : static_cast<double>(v);
}

nlohmann::json fault_records(const std::vector<FaultFiring>& firings) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& f : firings)
    out.push_back({{"fault", f.fault},
                   {"kind", std::string(to_string(f.kind))},
                   {"peer", f.peer >= 0 ? nlohmann::json(f.peer) : nlohmann::json(nullptr)},
                   {"fired", f.fired},
                   {"time_s", f.fired ? nlohmann::json(f.time_s) : nlohmann::json(nullptr)},
                   {"run_epochs", f.fired ? nlohmann::json(f.run_epochs) : nlohmann::json(nullptr)},
                   {"healed_s", optional_number(f.healed_s)}});
  return out;
}

// Under --chaos, each invariant: held, or why not; null otherwise.
nlohmann::json invariant_records(const std::vector<InvariantCheck>& checks) {
  if (checks.empty()) return nullptr;
  nlohmann::json out = nlohmann::json::array();
  for (const auto& c : checks)
    out.push_back({{"invariant", c.name}, {"held", c.held}, {"checked", c.checked}, {"detail", c.detail}});
  return out;
}

// The report's invariants section (runs with faults): one row per run, each invariant held
// or the violation.
std::string invariants_section(const SimConfig& cfg, const std::vector<RunResult>& runs) {
  std::ostringstream md;
  md << "\n## Invariants" << (cfg.chaos.empty() ? "" : " under `--chaos " + cfg.chaos + "`")
     << "\n\nOf every run with faults (sim/invariants.hpp): it ends by itself; every loss and parameter "
        "finite; every fault reported, fired or not; the status ok, "
        "diverged saying where, or failed naming a lost peer only where the algorithm cannot survive one; "
        "every finished peer's checkpoint loads, and every checkpoint seen on disk was whole; push-sum's "
        "weight "
        "is conserved (sgp, virtual engine; - where it does not apply).\n\n| algorithm | run | ends | finite "
        "| "
        "faults | status | checkpoints | weight | violation |\n|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : runs) {
    if (r.invariants.empty()) continue;
    md << "| " << r.algo << " | " << r.repeat << " |";
    std::string violation;
    for (const auto& c : r.invariants) {
      md << " " << (!c.checked ? "-" : c.held ? "held" : "**violated**") << " |";
      if (!c.held && violation.empty()) violation = c.name + ": " + c.detail;
    }
    md << " " << (violation.empty() ? "-" : violation) << " |\n";
  }
  return md.str();
}

// "kill:3@1ep fired at 5.2 s (1.01 epochs); ..." for the report's header.
std::string fault_text(const std::vector<FaultFiring>& firings) {
  std::string out;
  for (const auto& f : firings) {
    out += out.empty() ? "" : "; ";
    out += "`" + f.fault + "` ";
    out += f.fired ? "fired at " + fixed(f.time_s, 1) + " s (" + fixed(f.run_epochs, 2) + " epochs)"
                   : "never fired";
    if (f.healed_s) out += ", healed at " + fixed(*f.healed_s, 1) + " s";
  }
  return out;
}

}  // namespace

nlohmann::json summary_record(const RunResult& r) {
  return {
      {"algo", r.algo},
      {"topology", r.topology},
      {"peers", r.peers},
      {"epochs", epochs_json(r.epochs)},
      {"repeat", r.repeat},
      {"seed", r.seed},
      {"faults", fault_records(r.fault_firings)},
      {"link", r.link},
      {"startup_s", r.startup_s},
      {"wall_s", r.wall_s},
      {"samples_per_s", r.samples_per_s},
      {"final_acc_avg_model", final_value(r, &Evaluation::acc_avg_model)},
      {"final_acc_mean_peer", final_value(r, &Evaluation::acc_mean_peer)},
      {"consensus_distance", final_value(r, &Evaluation::consensus_distance)},
      {"target_acc", optional_number(r.target_acc)},
      {"time_to_target_s", optional_number(r.time_to_target_s)},
      {"bytes_to_target_per_peer", optional_number(r.bytes_to_target_per_peer)},
      // Against the all-reduce run of the same repeat (null without one that ended ok).
      {"time_to_reference_s", optional_number(r.time_to_reference_s)},
      {"acc_at_reference_end", optional_number(r.acc_at_reference_end)},
      {"budget", r.budget},
      {"shard_examples", r.shard_examples},
      // What the peers trained with, as rank 0 reported it: the settings as they arrived.
      {"peer_settings", r.peer_settings},
      {"peer_steps", r.peer_steps},
      {"bytes_sent_per_peer", r.bytes_sent_per_peer},
      {"peak_rss_mb_max", static_cast<double>(r.peak_rss_kb_max) / 1024.0},
      {"evaluations", r.curve.size()},
      {"status", r.status},
      {"engine", r.engine},
      {"real_s", r.real_s},
      // How much faster than real time the run went (virtual engine; null otherwise).
      {"virtual_s_per_wall_s",
       r.engine == "virtual" && r.real_s > 0 ? nlohmann::json(r.wall_s / r.real_s) : nlohmann::json(nullptr)},
      {"dir", r.dir.string()},
      {"checkpoint_problems", r.checkpoint_problems},
      {"checkpoint_versions_read", r.checkpoint_versions_read},
      // sgp in the virtual engine: the network's weight at the end (sim/push_sum_ledger.hpp).
      {"push_sum_weight", r.push_sum_weight ? nlohmann::json(*r.push_sum_weight) : nlohmann::json(nullptr)},
      {"invariants", invariant_records(r.invariants)}};
}

std::string run_done_line(const RunResult& r) {
  const std::string took = r.engine == "virtual" ? fixed(r.wall_s, 1) + " virtual s (" + fixed(r.real_s, 1) + " s real)"
                                                 : fixed(r.wall_s, 1) + " s";
  const Evaluation* last = r.final_evaluation();
  return "done in " + took + ": averaged-model accuracy " + (last ? fixed(last->acc_avg_model, 4) : "-") +
         ", status " + r.status;
}

std::string results_table(const std::vector<RunResult>& runs) {
  // The comparison with all-reduce's final accuracy, when the sweep has an all-reduce run.
  const bool reference = std::any_of(runs.begin(), runs.end(),
                                     [&](const RunResult& r) { return allreduce_reference(runs, r.repeat); });
  std::ostringstream out;
  out << "| algorithm | run | averaged-model accuracy | mean peer accuracy | time to target | MB to target | "
      << (reference ? "time to all-reduce's accuracy | accuracy when all-reduce ended | " : "")
      << "samples/s | MB sent per peer | peak MB per peer | wall s | status |\n"
      << "|---|---|---|---|---|---|" << (reference ? "---|---|" : "") << "---|---|---|---|---|\n";
  for (const auto& r : runs) {
    out << "| " << r.label() << " | " << r.repeat << " | " << final_text(r, &Evaluation::acc_avg_model)
        << " | " << final_text(r, &Evaluation::acc_mean_peer) << " | "
        << (r.time_to_target_s ? fixed(*r.time_to_target_s, 1) + " s" : (r.target_acc ? "not reached" : "-"))
        << " | "
        << (r.bytes_to_target_per_peer ? fixed(*r.bytes_to_target_per_peer / 1e6, 1)
                                       : (r.target_acc && !r.time_to_target_s ? "not reached" : "-"))
        << " | ";
    if (reference)
      out << (r.time_to_reference_s ? fixed(*r.time_to_reference_s, 1) + " s" : "not reached") << " | "
          << (r.acc_at_reference_end ? fixed(*r.acc_at_reference_end, 4) : "-") << " | ";
    out << fixed(r.samples_per_s, 0) << " | " << fixed(r.bytes_sent_per_peer / 1e6, 1) << " | "
        << fixed(static_cast<double>(r.peak_rss_kb_max) / 1024.0, 0)
        // One process holds every virtual peer: its peak is theirs together; its time is virtual.
        << (r.engine == "virtual" ? " (all peers)" : "") << " | " << fixed(r.wall_s, 1)
        << (r.engine == "virtual" ? " (virtual)" : "") << " | " << r.status << " |\n";
  }
  return out.str();
}

namespace {

// summary.json's settings: what the sweep ran with, beside its runs.
nlohmann::json summary_settings(const SimConfig& cfg) {
  nlohmann::json summary = {
      {"peers", cfg.peers},
      {"model", cfg.training.model},
      {"epochs", epochs_json(cfg.training.epochs)},
      {"batch", cfg.training.batch},
      {"lr", as_given(cfg.training.lr)},
      {"momentum", as_given(cfg.training.momentum)},
      {"faults", cfg.faults},
      {"chaos", cfg.chaos.empty() ? nlohmann::json(nullptr) : nlohmann::json(cfg.chaos)},
      {"link", cfg.link},
      {"runs", nlohmann::json::array()}};
  summary["bn_stats"] = cfg.bn_stats;
  summary["momentum_kind"] = cfg.momentum_kind;
  // What tells one sweep's runs from another's (bench/rank.py groups by them); a run's
  // "topology" is its algorithm's own where it has one, "graph" the --graph of the others.
  summary["partition"] = cfg.training.partition;
  summary["graph"] = cfg.graph;
  summary["average_over"] = cfg.average_over;
  summary["compress"] = cfg.compress;
  if (cfg.consensus_step > 0) summary["consensus_step"] = cfg.consensus_step;
  if (cfg.no_lookahead) summary["lookahead"] = false;
  // Where the peers trained, rank by rank ("cpu", "cuda:0", ...).
  summary["devices"] =
      cfg.peer_device.empty() ? nlohmann::json::array({"cpu"}) : nlohmann::json(cfg.peer_device);
  return summary;
}

}  // namespace

std::vector<std::filesystem::path> write_report(const std::filesystem::path& dir, const SimConfig& cfg,
                                                const std::vector<RunResult>& runs) {
  std::filesystem::create_directories(dir);
  nlohmann::json summary = summary_settings(cfg);
  for (const auto& r : runs) summary["runs"].push_back(summary_record(r));

  std::ostringstream csv;
  csv << "algo,repeat,time_s,run_epochs,peers,acc_avg_model,loss_avg_model,acc_mean_peer,acc_min_peer,"
         "acc_max_peer,acc_std_peer,consensus_distance,bytes_per_peer\n";
  for (const auto& r : runs)
    for (const auto& e : r.curve)
      csv << r.algo << ',' << r.repeat << ',' << fixed(e.time_s, 3) << ',' << fixed(e.run_epochs, 4) << ','
          << e.peers << ',' << fixed(e.acc_avg_model, 5) << ',' << fixed(e.loss_avg_model, 5) << ','
          << fixed(e.acc_mean_peer, 5) << ',' << fixed(e.acc_min_peer, 5) << ',' << fixed(e.acc_max_peer, 5)
          << ',' << fixed(e.acc_std_peer, 5) << ',' << e.consensus_distance << ','
          << (e.bytes_per_peer >= 0 ? fixed(e.bytes_per_peer, 0) : "") << '\n';

  std::ostringstream md;
  md << "# hearsay sim: " << cfg.peers << " peers, " << cfg.training.model << ", " << cfg.training.epochs
     << " epochs, batch " << cfg.training.batch << " per peer\n\n";
  md << "Faults: " << (cfg.faults.empty() ? "none" : "`" + cfg.faults + "`")
     << (cfg.chaos.empty() ? "" : " (drawn by `--chaos " + cfg.chaos + "`)")
     << ". Links: " << (cfg.link.empty() ? "not emulated" : "`" + cfg.link + "`") << ".";
  if (cfg.target_acc) md << " Target accuracy: " << fixed(*cfg.target_acc, 3) << ".";
  md << "\n\n" << results_table(runs);
  bool any_fault = false;
  for (const auto& r : runs) any_fault = any_fault || !r.fault_firings.empty();
  if (any_fault) {
    md << "\nFaults of each run:\n\n";
    for (const auto& r : runs)
      md << "- " << r.algo << " " << r.repeat << ": " << fault_text(r.fault_firings) << "\n";
  }
  if (std::any_of(runs.begin(), runs.end(), [](const RunResult& r) { return !r.invariants.empty(); }))
    md << invariants_section(cfg, runs);
  md << "\nAveraged-model accuracy: the mean of the parameters of the peers that finished (the last "
        "checkpoint of each), on the test set. Peak MB per peer: the largest resident set of any peer "
        "process of the run. Times (wall s, time to target, the curves) count from the moment the last "
        "peer was up and training began; starting the peers (loading data, joining) is startup_s in "
        "summary.json. Time to all-reduce's accuracy: the first evaluation within "
     << fixed(kReferenceMargin * 100, 1)
     << " point of the final accuracy of the all-reduce run of the same repeat (marked in the plot "
        "against time); accuracy when all-reduce ended: the last evaluation by then. Budget: "
     << (cfg.budget == "global" ? "global (the peers together train the epochs; fast peers take more steps)"
                                : "per peer (each peer trains the epochs)")
     << ". Curves: curves.csv; per-peer logs and metrics: the run directories.\n\n"
        "![accuracy against wall time](accuracy_vs_time.png)\n![accuracy against epochs]"
        "(accuracy_vs_epochs.png)\n![consensus distance against wall time](consensus_vs_time.png)\n";
  const bool bytes = std::ranges::any_of(runs, [](const RunResult& r) {
    return std::ranges::any_of(r.curve, [](const Evaluation& e) { return e.bytes_per_peer >= 0; });
  });
  if (bytes) md << "![accuracy against bytes sent](accuracy_vs_bytes.png)\n";

  std::vector<std::filesystem::path> written;
  const std::pair<const char*, std::string> files[] = {
      {"summary.json", summary.dump(2) + "\n"}, {"curves.csv", csv.str()}, {"report.md", md.str()}};
  for (const auto& [name, content] : files) {
    write_file_atomically(dir / name, content);
    written.push_back(dir / name);
  }
  return written;
}

}  // namespace hearsay::sim
