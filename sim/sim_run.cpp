#include "sim/sim_run.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "gossip/mixing/algorithms/registry.hpp"
#include "base/log.hpp"
#include "gossip/network/transport/zmq_transport.hpp"
#include "base/atomic_file.hpp"
#include "model/checkpoint.hpp"
#include "model/zoo.hpp"
#include "peer/peer_config.hpp"
#include "peer/state_transfer.hpp"
#include "sim/divergence_check.hpp"
#include "sim/evaluation_worker.hpp"
#include "sim/fault_log.hpp"
#include "sim/peer_cluster.hpp"
#include "sim/peer_setup.hpp"

namespace hearsay::sim {
namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Why a peer ended, for the run's status: the last line of its log that `hearsay peer`
// wrote on its way out ("hearsay peer: ..."), else the last that says error.
std::string last_error_line(const fs::path& log) {
  std::ifstream in(log);
  std::string line, fatal, error, last;
  while (std::getline(in, line)) {
    if (line.rfind("hearsay peer: ", 0) == 0) fatal = line.substr(14);
    if (line.find("error") != std::string::npos) error = line;
    // A usage error (exit 2) is the flag parser's line, followed by hints to run --help.
    if (!line.empty() && line.rfind("Run ", 0) != 0) last = line;
  }
  std::string found = !fatal.empty() ? fatal : !error.empty() ? error : last;
  if (found.size() > 300) found = found.substr(0, 300) + "...";
  return found;
}

// The address a peer bound: it listens on an ephemeral port (tcp://127.0.0.1:*), so
// that no two runs, nor anything else on the box, can race for a port, and logs
// "listening at ADDRESS" once bound. Reads its log from byte `from` (a restarted peer
// appends to the same log). Throws std::runtime_error when the peer exits first or does
// not bind within `timeout`.
std::string listening_address(PeerCluster& cluster, int rank, const fs::path& log, std::uintmax_t from,
                              std::chrono::seconds timeout) {
  static constexpr std::string_view kMarker = "listening at ";
  const auto give_up = Clock::now() + timeout;
  for (;;) {
    std::ifstream in(log);
    in.seekg(static_cast<std::streamoff>(from));
    std::string line;
    while (std::getline(in, line))
      if (const auto at = line.find(kMarker); at != std::string::npos && !in.eof()) {  // a whole line
        std::string address = line.substr(at + kMarker.size());
        while (!address.empty() && (address.back() == ' ' || address.back() == '\r')) address.pop_back();
        return address;
      }
    cluster.reap();
    if (!cluster.running(rank))
      throw std::runtime_error(rank_peer_id(rank) + " " + cluster.exit_of(rank)->describe() +
                               " before it listened: " + last_error_line(log));
    if (Clock::now() > give_up)
      throw std::runtime_error(rank_peer_id(rank) + " did not listen within " +
                               std::to_string(timeout.count()) + " s (see " + log.string() + ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the log is all there is to watch
  }
}

// What a peer's metrics file says so far, read incrementally.
struct PeerView {
  std::ifstream file;
  std::string partial;  // a line not finished yet
  std::int64_t step = 0;
  double bytes_sent = 0;
};

void read_new_lines(PeerView& v, const fs::path& path,
                    const std::function<void(const nlohmann::json&)>& each) {
  if (!v.file.is_open()) {
    v.file.open(path);
    if (!v.file.is_open()) return;
  }
  v.file.clear();  // past EOF last time
  std::string chunk;
  char buf[65536];
  while (v.file.read(buf, sizeof buf) || v.file.gcount() > 0)
    chunk.append(buf, static_cast<std::size_t>(v.file.gcount()));
  v.partial += chunk;
  std::size_t start = 0;
  for (std::size_t nl; (nl = v.partial.find('\n', start)) != std::string::npos; start = nl + 1) {
    const auto rec = nlohmann::json::parse(v.partial.substr(start, nl - start), nullptr, false);
    if (rec.is_discarded() || !rec.is_object()) continue;
    each(rec);
    if (rec.value("type", "") == "metrics") {
      v.step = std::max<std::int64_t>(v.step, rec.value("step", std::int64_t{0}));
      v.bytes_sent = std::max(v.bytes_sent, rec.value("bytes_sent", 0.0));
    }
  }
  v.partial.erase(0, start);
}

// A log level for the object's lifetime, the previous one back after it (also when the
// run throws).
class LogLevelFor {
 public:
  explicit LogLevelFor(logging::Level level) : previous_(logging::level()) { logging::set_level(level); }
  ~LogLevelFor() { logging::set_level(previous_); }
  LogLevelFor(const LogLevelFor&) = delete;
  LogLevelFor& operator=(const LogLevelFor&) = delete;

 private:
  logging::Level previous_;
};

std::string this_executable() { return fs::read_symlink("/proc/self/exe").string(); }

// Until every peer wrote its "ready" record (read by read_metrics); std::runtime_error
// naming a peer that ended first (with its last error line) or was not ready in time.
void await_ready(PeerCluster& cluster, int n, const std::vector<char>& ready,
                 const std::function<void(int)>& read_metrics, const std::function<std::string(int)>& why) {
  const auto give_up = Clock::now() + std::chrono::seconds(120);
  for (;;) {
    int missing = -1;
    for (int r = 0; r < n; ++r) {
      read_metrics(r);
      if (!ready[static_cast<std::size_t>(r)] && missing < 0) missing = r;
    }
    if (missing < 0) return;
    cluster.reap();
    for (int r = 0; r < n; ++r)
      if (!ready[static_cast<std::size_t>(r)] && !cluster.running(r))
        throw std::runtime_error(rank_peer_id(r) + " " + cluster.exit_of(r)->describe() +
                                 " before training began: " + why(r));
    if (Clock::now() > give_up)
      throw std::runtime_error(rank_peer_id(missing) + " was not ready to train within 120 s of listening");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the metrics file is all there is to watch
  }
}

std::string topology_of(const std::string& algo, const std::string& graph) {
  const auto* a = algorithms::find_algorithm(algo);
  return a != nullptr && !a->topology.empty() ? std::string(a->topology) : graph;
}

}  // namespace

RunResult run_simulation(const SimConfig& cfg, const std::vector<Fault>& faults, const std::string& algo,
                         int repeat, std::uint64_t seed, const TrainTest& data, const fs::path& dir,
                         const std::function<void(const RunProgress&)>& progress,
                         const std::function<bool()>& stop) {
  fs::create_directories(dir);
  const int n = cfg.peers;
  const std::string run_id = "sim-" + algo + "-" + std::to_string(repeat) + "-" + std::to_string(::getpid());

  const std::string executable = cfg.binary.empty() ? this_executable() : cfg.binary;
  std::vector<std::vector<std::string>> argv;
  std::vector<PeerFiles> files;
  for (int r = 0; r < n; ++r) {
    argv.push_back(peer_arguments(cfg, faults, executable, algo, r, seed, run_id, dir));
    files.emplace_back(dir, r);
    const auto& f = files.back();
    fs::remove(f.log);  // a repeat in the same directory starts afresh
    fs::remove(f.metrics);
    fs::remove(f.control);
    fs::remove_all(f.checkpoint_dir);
  }
  auto log_of = [&](int r) { return files[static_cast<std::size_t>(r)].log; };
  auto metrics_of = [&](int r) { return files[static_cast<std::size_t>(r)].metrics; };
  // What each peer's control file says (partitions, late slow faults, and the hold that
  // starts the peers together); written when it changes.
  std::vector<emulation::PeerControl> controls(static_cast<std::size_t>(n));
  bool holding = true;
  // Kills and restarts in epochs: where their peer pauses for them (pause_step), and the
  // step each peer said it paused at (-1: not paused).
  std::vector<bool> fault_done(faults.size(), false);
  std::vector<std::optional<std::int64_t>> pause_at;
  for (const auto& f : faults) pause_at.push_back(pause_step(f, data.train.count, n, cfg.batch));
  std::vector<std::int64_t> paused(static_cast<std::size_t>(n), -1);
  auto write_controls = [&](double elapsed, double run_epochs) {
    auto now = controls_at(faults, n, [&](const FaultTime& t) { return reached(t, elapsed, run_epochs); });
    for (std::size_t f = 0; f < faults.size(); ++f) {
      if (fault_done[f] || !pause_at[f]) continue;
      auto& at = now.at(static_cast<std::size_t>(faults[f].peer)).pause_at;
      at = std::min(at.value_or(*pause_at[f]), *pause_at[f]);
    }
    for (int r = 0; r < n; ++r) {
      const auto i = static_cast<std::size_t>(r);
      now[i].hold = holding;
      if (now[i] == controls[i] && fs::exists(files[i].control)) continue;
      write_file_atomically(files[i].control, to_text(now[i]));
      controls[i] = now[i];
    }
  };
  write_controls(0, 0);

  EvaluationWorker worker(cfg.model, data.test);
  transport::ZmqOptions observer_options;
  observer_options.id = "sim-observer";
  observer_options.expect = {run_id, worker.fingerprint()};
  observer_options.security.insecure = true;
  observer_options.max_payload_bytes = 4 * 3 * static_cast<std::uint64_t>(worker.param_count()) + 4096;
  // The observer's transport talks about every peer that leaves.
  const LogLevelFor quiet(logging::Level::error);
  transport::ZmqTransport observer(observer_options);

  RunResult result;
  result.algo = algo;
  result.topology = topology_of(algo, cfg.graph);
  result.peers = n;
  result.epochs = cfg.epochs;
  result.repeat = repeat;
  result.seed = seed;
  result.faults = cfg.faults;
  result.link = cfg.link;
  result.target_acc = cfg.target_acc;
  result.dir = dir;

  PeerCluster cluster(n);
  std::vector<PeerView> views(static_cast<std::size_t>(n));
  DivergenceCheck divergence(n, make_model(cfg.model)->classes());
  std::vector<char> ready(static_cast<std::size_t>(n), 0);
  auto read_metrics = [&](int r) {
    read_new_lines(views[static_cast<std::size_t>(r)], metrics_of(r), [&](const nlohmann::json& record) {
      divergence.observe(r, record);
      if (record.value("type", "") == "ready") ready[static_cast<std::size_t>(r)] = 1;
      if (record.value("type", "") == "paused")
        paused[static_cast<std::size_t>(r)] = record.value("step", -1);
    });
  };
  std::vector<bool> killed(static_cast<std::size_t>(n), false);
  FaultLog fault_log(faults);
  std::vector<std::string> addresses(static_cast<std::size_t>(n));
  // Starts rank r (joining through `seeds`, if any); where it listens is learnt by
  // await_peer, so that peers started together load their data at the same time.
  std::vector<std::uintmax_t> log_from(static_cast<std::size_t>(n), 0);
  auto spawn_peer = [&](int r, std::vector<std::string> args, const std::vector<std::string>& seeds) {
    for (const auto& seed : seeds) args.insert(args.end(), {"--join", seed});
    const fs::path log = log_of(r);
    log_from[static_cast<std::size_t>(r)] = fs::exists(log) ? fs::file_size(log) : 0;
    cluster.start(r, args, log);
  };
  auto await_peer = [&](int r) {
    addresses[static_cast<std::size_t>(r)] = listening_address(
        cluster, r, log_of(r), log_from[static_cast<std::size_t>(r)], std::chrono::seconds(60));
    observer.connect(rank_peer_id(r), addresses[static_cast<std::size_t>(r)]);
  };
  const auto launched = Clock::now();
  std::string status;
  try {
    // The seed first: the others join through it. Every algorithm starts training once
    // all have joined, as the fixed graphs must; gossip would otherwise let the first
    // peers train alone (a restarted peer rejoins a run under way, without the flag).
    for (int r = 0; r < n; ++r) {
      std::vector<std::string> args = argv[static_cast<std::size_t>(r)];
      args.push_back("--wait-for-world");
      spawn_peer(r, std::move(args), r == 0 ? std::vector<std::string>{} : std::vector{addresses[0]});
      if (r == 0) await_peer(0);
    }
    for (int r = 1; r < n; ++r) await_peer(r);
    await_ready(cluster, n, ready, read_metrics, [&](int r) { return last_error_line(log_of(r)); });
  } catch (const std::exception& e) {
    status = std::string("failed: ") + e.what();
  }
  // Times count from here: every peer is ready (joined, the world whole, its mixer up), and
  // lifting the hold starts them all at once. Loading and joining (startup_s) cost every
  // algorithm the same and are reported apart.
  holding = false;
  write_controls(0, 0);
  const auto start = Clock::now();
  result.startup_s = std::chrono::duration<double>(start - launched).count();

  const double train_count = static_cast<double>(data.train.count);
  const double eval_every = eval_interval(cfg);
  double next_eval = eval_every;
  const bool exact_steps = evaluated_at_exact_steps(algo, cfg.overlap);
  std::int64_t next_point = 1;
  // The snapshots k of the peers that saved one (killed peers left out), read and removed.
  auto read_snapshots = [&](std::int64_t k) {
    std::vector<PeerParams> collected;
    const auto count = static_cast<std::size_t>(worker.param_count());
    for (int r = 0; r < n; ++r) {
      const fs::path path = files[static_cast<std::size_t>(r)].snapshot(k);
      if (killed[static_cast<std::size_t>(r)] || !fs::exists(path)) continue;
      std::vector<float> params(count);
      std::ifstream in(path, std::ios::binary);
      in.read(reinterpret_cast<char*>(params.data()), static_cast<std::streamsize>(count * sizeof(float)));
      if (!in || in.peek() != std::char_traits<char>::eof()) {
        logging::warn("sim: " + path.string() + " is not " + std::to_string(count) + " parameters; left out");
        continue;
      }
      collected.push_back({r, std::move(params)});
      fs::remove(path);
    }
    return collected;
  };
  auto last_progress = Clock::now() - std::chrono::seconds(1);
  while (status.empty()) {
    for (int r = 0; r < n; ++r) read_metrics(r);
    double samples = 0;
    for (const auto& v : views) samples += static_cast<double>(v.step) * cfg.batch;
    const double run_epochs = samples / train_count;
    const double elapsed = seconds_since(start);
    cluster.reap();
    write_controls(elapsed, run_epochs);
    fault_log.observe(elapsed, run_epochs);

    for (std::size_t i = 0; i < faults.size(); ++i) {
      const Fault& f = faults[i];
      if (fault_done[i] || (f.kind != Fault::Kind::kill && f.kind != Fault::Kind::restart)) continue;
      const auto r = static_cast<std::size_t>(f.peer);
      const bool waits_for_it = pause_at[i] && paused[r] >= *pause_at[i];
      if (!reached(f.at, elapsed, run_epochs) && !waits_for_it) continue;
      fault_done[i] = true;
      // Paused at its step, the peer is further than its last metrics (every --log-every) say.
      const double at_pause = waits_for_it ? static_cast<double>(paused[r]) * n * cfg.batch / train_count : 0;
      fault_log.fired(i, elapsed, std::max(run_epochs, at_pause));
      paused[r] = -1;
      if (cluster.running(f.peer)) {
        cluster.signal(f.peer, SIGKILL);
        while (cluster.running(f.peer)) {  // SIGKILL cannot be ignored: it ends at once
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
          cluster.reap();
        }
      }
      write_controls(elapsed, run_epochs);  // no pause for it any more: a restart starts without
      killed[r] = f.kind == Fault::Kind::kill;
      if (f.kind == Fault::Kind::restart) {
        // It rejoins through any of the peers that still run.
        std::vector<std::string> seeds;
        for (int other = 0; other < n; ++other)
          if (other != f.peer && cluster.running(other))
            seeds.push_back(addresses[static_cast<std::size_t>(other)]);
        std::vector<std::string> again = argv[r];
        again.push_back("--resume");
        try {
          spawn_peer(f.peer, again, seeds);
          await_peer(f.peer);
        } catch (const std::exception& e) {
          status = std::string("failed: restarting ") + e.what();
        }
      }
    }

    if (exact_steps) {
      // Point k is due once every peer still running has saved its snapshot k.
      while (static_cast<double>(next_point) * eval_every < cfg.epochs - 1e-9) {
        bool all_there = true;
        for (int r = 0; r < n && all_there; ++r)
          if (cluster.running(r) && !killed[static_cast<std::size_t>(r)])
            all_there = fs::exists(files[static_cast<std::size_t>(r)].snapshot(next_point));
        if (!all_there) break;
        auto collected = read_snapshots(next_point);
        if (!collected.empty())
          worker.submit(seconds_since(start), static_cast<double>(next_point) * eval_every,
                        std::move(collected));
        ++next_point;
      }
    } else if (run_epochs >= next_eval && next_eval < cfg.epochs) {
      next_eval += eval_every;
      // All live peers at once, within one deadline: a peer that is leaving as the point
      // falls due (its run done) costs the point that peer, not the others.
      std::vector<std::string> live;
      for (int r = 0; r < n; ++r)
        if (cluster.running(r)) live.push_back(rank_peer_id(r));
      std::vector<PeerParams> collected;
      for (auto& pulled : pull_states(observer, live, static_cast<std::size_t>(worker.param_count()),
                                      std::chrono::seconds(2)))
        for (int r = 0; r < n; ++r)
          if (pulled.from == rank_peer_id(r)) collected.push_back({r, std::move(pulled.state.params)});
      if (!collected.empty()) worker.submit(seconds_since(start), run_epochs, std::move(collected));
    }

    if (cluster.running_count() == 0) break;
    if (stop && stop()) {
      status = "interrupted";
      break;
    }
    if (elapsed > cfg.run_timeout_s) {
      std::string still;
      for (int r = 0; r < n; ++r)
        if (cluster.running(r)) still += (still.empty() ? "" : ", ") + rank_peer_id(r);
      status = "timeout after " + std::to_string(static_cast<long>(cfg.run_timeout_s)) +
               " s (still running: " + still + ")";
      break;
    }
    if (progress && Clock::now() - last_progress >= std::chrono::milliseconds(500)) {
      last_progress = Clock::now();
      RunProgress p;
      p.algo = &algo;
      p.time_s = elapsed;
      p.run_epochs = run_epochs;
      p.epochs = cfg.epochs;
      p.running = cluster.running_count();
      p.samples_per_s = elapsed > 0 ? samples / elapsed : 0;
      p.last_acc = worker.last_acc();
      progress(p);
    }
    // The watch interval, not a synchronisation: faults and evaluation points given in epochs
    // happen within one interval of being due, a small fraction of an epoch on any real run.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  result.wall_s = seconds_since(start);
  cluster.stop_all(std::chrono::seconds(10));

  // The final parameters: the last checkpoint of every peer that finished its run.
  std::vector<PeerParams> last;
  {
    auto model = make_model(cfg.model);
    for (int r = 0; r < n; ++r) {
      const auto& e = cluster.exit_of(r);
      if (killed[static_cast<std::size_t>(r)] || !e || e->signalled || e->code != 0) continue;
      try {
        read_checkpoint(checkpoint_path(files[static_cast<std::size_t>(r)].checkpoint_dir), *model);
        const auto p = model->params();
        last.push_back({r, std::vector<float>(p.begin(), p.end())});
      } catch (const std::exception& ex) {
        logging::warn(std::string("sim: ") + ex.what());
      }
    }
  }
  double samples = 0, bytes = 0;
  for (int r = 0; r < n; ++r) {
    read_metrics(r);
    samples += static_cast<double>(views[static_cast<std::size_t>(r)].step) * cfg.batch;
    bytes += views[static_cast<std::size_t>(r)].bytes_sent;
  }
  const bool has_final = !last.empty();
  if (has_final) worker.submit(result.wall_s, samples / train_count, std::move(last));
  result.curve = worker.finish();
  // A run that diverged says so, also when its peers exited with an error on the way.
  if (status.empty() || status.starts_with("failed"))
    if (std::string diverged = divergence.verdict(result.curve, has_final); !diverged.empty())
      status = std::move(diverged);
  result.samples_per_s = result.wall_s > 0 ? samples / result.wall_s : 0;
  result.bytes_sent_per_peer = bytes / n;
  if (cfg.target_acc)
    for (const auto& e : result.curve)
      if (e.acc_avg_model >= *cfg.target_acc) {
        result.time_to_target_s = e.time_s;
        break;
      }
  for (int r = 0; r < n; ++r) {
    const auto& e = cluster.exit_of(r);
    const long rss = cluster.peak_rss_kb(r);
    result.peak_rss_kb.push_back(rss);
    result.peak_rss_kb_max = std::max(result.peak_rss_kb_max, rss);
    if (status.empty() && !killed[static_cast<std::size_t>(r)] && e && (e->signalled || e->code != 0)) {
      const std::string why = last_error_line(log_of(r));
      status = "failed: " + rank_peer_id(r) + " " + e->describe() + (why.empty() ? "" : ": " + why);
    }
  }
  // A run whose fault never came is not the experiment that was asked for.
  result.fault_firings = fault_log.firings();
  const std::string not_fired = fault_log.not_fired(result.wall_s, samples / train_count);
  result.status = !status.empty() ? status : not_fired.empty() ? "ok" : "ok (" + not_fired + ")";
  return result;
}

}  // namespace hearsay::sim
