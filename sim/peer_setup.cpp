#include "sim/peer_setup.hpp"

#include <algorithm>
#include <cmath>

#include "base/number_flag.hpp"
#include "gossip/mixing/algorithms/registry.hpp"
#include "gossip/mixing/compress/compressor.hpp"
#include "peer/peer_config.hpp"

namespace hearsay::sim {

bool evaluated_at_exact_steps(const std::string& algo, bool overlap) {
  // Peers that drift apart in steps (pairwise algorithms, sgp with overlap) have no one
  // state at step K until the slowest gets there: they are evaluated live instead.
  const auto* a = algorithms::find_algorithm(algo);
  return a != nullptr && a->lockstep(overlap && a->supports_overlap);
}

std::vector<std::string> link_arguments(const std::string& link, const std::vector<Fault>& faults, int rank) {
  std::vector<std::string> args;
  std::string own = link;
  for (const auto& f : faults)
    if (f.kind == Fault::Kind::link && f.peer == rank && !f.timed_link()) own = emulation::to_string(f.link);
  if (!own.empty()) args.insert(args.end(), {"--link", own});
  if (!link.empty()) args.insert(args.end(), {"--link-others", link});
  // A message to a peer with a slow link of its own crosses that link too: the sender
  // emulates the whole path (link_emulator.hpp), so it must know the peer's link. A link
  // with a time comes and goes through the control file, and slows what its peer sends.
  for (const auto& f : faults) {
    if (f.kind != Fault::Kind::link) continue;
    if (f.timed_link() && f.peer == rank) args.emplace_back("--link-may-change");
    if (!f.timed_link() && f.peer != rank)
      args.insert(args.end(), {"--link-peer", rank_peer_id(f.peer) + "=" + emulation::to_string(f.link)});
  }
  return args;
}

std::vector<emulation::PeerControl> controls_at(const std::vector<Fault>& faults, int peers,
                                                const std::function<bool(const FaultTime&)>& reached) {
  std::vector<emulation::PeerControl> controls(static_cast<std::size_t>(peers));
  for (const auto& f : faults) {
    if (f.kind == Fault::Kind::slow && reached(f.at))
      controls.at(static_cast<std::size_t>(f.peer)).slowdown = f.slowdown;
    if (f.timed_link() && reached(f.at) && (f.to_the_end || !reached(f.until)))
      controls.at(static_cast<std::size_t>(f.peer)).link = f.link;
    if (f.kind != Fault::Kind::partition || !reached(f.at) || reached(f.until)) continue;
    // The group of every rank: a listed group's index, or one past the last for the
    // peers listed in none (they form one more group together).
    std::vector<std::size_t> group(static_cast<std::size_t>(peers), f.groups.size());
    for (std::size_t g = 0; g < f.groups.size(); ++g)
      for (const int r : f.groups[g]) group.at(static_cast<std::size_t>(r)) = g;
    for (int r = 0; r < peers; ++r)
      for (int other = 0; other < peers; ++other)
        if (group[static_cast<std::size_t>(other)] != group[static_cast<std::size_t>(r)])
          controls[static_cast<std::size_t>(r)].blocked.push_back(rank_peer_id(other));
  }
  return controls;
}

std::optional<std::int64_t> pause_step(const Fault& fault, std::int64_t train_examples, int peers,
                                       int batch) {
  if ((fault.kind != Fault::Kind::kill && fault.kind != Fault::Kind::restart) ||
      fault.at.unit != FaultTime::Unit::epochs || peers < 1 || batch < 1)
    return std::nullopt;
  const double step = std::ceil(
      fault.at.value * static_cast<double>(train_examples) / (static_cast<double>(peers) * batch) - 1e-9);
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(step));
}

PeerFiles::PeerFiles(const std::filesystem::path& run_dir, int rank) {
  const std::string name = "peer" + std::to_string(rank);
  log = run_dir / (name + ".log");
  metrics = run_dir / (name + ".jsonl");
  checkpoint_dir = run_dir / name;
  control = run_dir / (name + ".control");
  ready = run_dir / (name + ".ready.json");
  settings = run_dir / (name + ".toml");
}

PeerConfig parse_peer_command_line(const std::vector<std::string>& args, std::string* settings_toml) {
  PeerConfig cfg;
  CLI::App app;
  add_peer_options(app, cfg);
  // argv[0] and the subcommand ("hearsay", "peer") go; CLI11 takes the rest reversed.
  const auto first = std::ranges::find(args, std::string("peer"));
  if (first == args.end()) throw std::invalid_argument("not a `hearsay peer` command line");
  std::vector<std::string> reversed(args.rbegin(), std::make_reverse_iterator(first + 1));
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    throw std::invalid_argument(std::string("a peer's command line does not parse: ") + e.what());
  }
  validate(cfg);
  if (settings_toml != nullptr) *settings_toml = print_config(app);
  return cfg;
}

std::filesystem::path PeerFiles::snapshot(std::int64_t k) const {
  return checkpoint_dir / ("params-" + std::to_string(k) + ".f32");
}

std::vector<std::string> peer_program(const SimConfig& cfg, const std::string& executable) {
  if (cfg.peer_command.empty()) return {executable, "peer"};
  // The shell reads the command as the user wrote it (quotes, VAR=value, ~); the flags follow
  // as its arguments, with "peer" as $0 so that they read as a `hearsay peer` command line.
  return {"/bin/sh", "-c", "exec " + cfg.peer_command + " \"$@\"", "peer"};
}

std::vector<std::string> peer_arguments(const SimConfig& cfg, const std::vector<Fault>& faults,
                                        const std::string& executable, const std::string& algo, int rank,
                                        std::uint64_t seed, const std::string& run_id,
                                        const std::filesystem::path& run_dir) {
  const PeerFiles files(run_dir, rank);
  const auto any_of_kind = [&](Fault::Kind kind) {
    return std::any_of(faults.begin(), faults.end(), [&](const Fault& f) { return f.kind == kind; });
  };
  // The training flags exactly as given (training_arguments), with what is the peer's own:
  // the repeat's seed, one compute thread (the box is shared), the device resolved once for
  // the sweep (resolve_peer_devices: the peers never guess), and, for peers that start
  // apart, each rank's initial parameters (the data order and the partners still come
  // from --seed).
  TrainingSettings training = cfg.training;
  training.seed = seed;
  training.threads = 1;
  training.device = cfg.peer_device.empty()
                        ? std::string("cpu")
                        : cfg.peer_device[static_cast<std::size_t>(rank) % cfg.peer_device.size()];
  if (cfg.distinct_init) training.init_seed = seed + 7919 * static_cast<std::uint64_t>(rank + 1);
  std::vector<std::string> a = peer_program(cfg, executable);
  a.insert(a.end(),
           {"--listen", "tcp://127.0.0.1:*", "--rank", std::to_string(rank), "--world",
            std::to_string(cfg.peers), "--insecure", "--run", run_id, "--algo", algo, "--graph", cfg.graph});
  const auto train = training_arguments(training);
  a.insert(a.end(), train.begin(), train.end());
  a.insert(a.end(),
           {// Metrics four times a second: they tell the simulator the run's progress, so
            // faults and evaluations given in epochs happen on time.
            "--log-every", "0.25", "--metrics", files.metrics.string(), "--checkpoint",
            files.checkpoint_dir.string(),
            // A restarted peer resumes from its last checkpoint; a full disk is felt by the
            // checkpoints written while it lasts; otherwise only the final one counts.
            "--checkpoint-every",
            any_of_kind(Fault::Kind::restart)     ? "5s"
            : any_of_kind(Fault::Kind::disk_full) ? "1s"
                                                  : "0"});
  if (evaluated_at_exact_steps(algo, cfg.overlap))
    a.insert(a.end(), {"--snapshot-every", exact_flag_number(eval_interval(cfg))});
  // Only the graph algorithms that support it overlap: allreduce stays the synchronous
  // baseline, and gossip's pairwise exchange has no round to run ahead of.
  const auto* traits = algorithms::find_algorithm(algo);
  if (cfg.overlap && traits != nullptr && traits->supports_overlap) a.push_back("--overlap");
  // The simulator ends a global budget itself (the control file's stop); the peers follow
  // the run's progress with their learning rate.
  if (cfg.budget == "global") a.insert(a.end(), {"--budget", "global"});
  if (!cfg.step_time.empty()) a.insert(a.end(), {"--min-step-time", cfg.step_time});
  // The simulator evaluates the models itself: a peer evaluates only at its end, so that
  // eight peers' test passes at every epoch's end do not stall the box's training.
  a.insert(a.end(), {"--epoch-eval", "false"});
  if (cfg.bn_stats != "mix") a.insert(a.end(), {"--bn-stats", cfg.bn_stats});
  if (cfg.momentum_kind != "local" && algo != "none")
    a.insert(a.end(), {"--momentum-kind", cfg.momentum_kind});
  if (cfg.average_over != "examples") a.insert(a.end(), {"--average-over", cfg.average_over});
  const std::string compress = compress_for(cfg, algo);
  if (compress != "f32") a.insert(a.end(), {"--compress", compress});
  if (cfg.consensus_step > 0 &&
      (compress::is_difference_compressor(compress) || compress::power_gossip(compress)))
    a.insert(a.end(), {"--consensus-step", exact_flag_number(cfg.consensus_step)});
  if (cfg.no_lookahead && algorithms::runs_lookahead(algo, compress)) a.push_back("--no-lookahead");
  for (const auto& f : faults)
    if (f.kind == Fault::Kind::slow && f.peer == rank && f.at.value == 0)
      a.insert(a.end(), {"--slowdown", exact_flag_number(f.slowdown)});
  a.insert(a.end(), {"--control-file", files.control.string(), "--ready-file", files.ready.string()});
  const auto links = link_arguments(cfg.link, faults, rank);
  a.insert(a.end(), links.begin(), links.end());
  // The peers share this machine's clock: each message takes the longer of its emulated
  // time and what the box itself takes to carry it, not their sum (emulated_transport.hpp).
  // Every peer holds, also one that emulates no link of its own.
  a.insert(a.end(), {"--link-hold-at", "receiver"});
  if (cfg.http_port > 0) a.insert(a.end(), {"--http", "127.0.0.1:" + std::to_string(cfg.http_port + rank)});
  a.insert(a.end(), cfg.peer_args.begin(), cfg.peer_args.end());
  return a;
}

nlohmann::json prometheus_targets(const SimConfig& cfg, const std::string& run_id, const std::string& algo) {
  nlohmann::json entries = nlohmann::json::array();
  if (cfg.http_port == 0) return entries;
  for (int r = 0; r < cfg.peers; ++r)
    entries.push_back(
        {{"targets", {"127.0.0.1:" + std::to_string(cfg.http_port + r)}},
         {"labels",
          {{"run", run_id}, {"rank", std::to_string(r)}, {"host", "127.0.0.1"}, {"algorithm", algo}}}});
  return entries;
}

}  // namespace hearsay::sim
