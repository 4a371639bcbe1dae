#include "peer/peer_command.hpp"

#include <atomic>
#include <csignal>
#include <cstdio>

#include "base/stop_signals.hpp"
#include "gossip/network/transport/transport.hpp"
#include "model/data/dataset.hpp"
#include "model/device.hpp"
#include "peer/peer_process.hpp"

namespace hearsay {

namespace {

std::atomic<bool> g_stop{false};
extern "C" void on_stop_signal(int) { g_stop.store(true); }

}  // namespace

CLI::App* add_peer_command(CLI::App& app, PeerConfig& cfg) {
  CLI::App* cmd = app.add_subcommand(
      "peer", "Run one peer of a training run: join through --join, train on this machine, mix with others");
  add_peer_options(*cmd, cfg);
  cmd->footer(
      "Every flag can also be set in a TOML file given with --config (docs/CONFIG.md).\n"
      "Examples: two peers that start training together once both are up\n"
      "  hearsay peer --listen tcp://0.0.0.0:7000 --insecure --data synthetic --min-peers 2\n"
      "  hearsay peer --listen tcp://0.0.0.0:7001 --join tcp://host1:7000 --insecure --data synthetic --min-peers 2\n"
      "Per-peer files from one command line: --metrics 'metrics-{id}.jsonl' --checkpoint 'ckpt-{id}'\n"
      "({rank} with --rank). Many peers at once: scripts/launch --local N, or --hosts FILE (docs/LAB.md).\n"
      "SIGINT/SIGTERM: finish the step, write a final checkpoint, say bye, exit 0 (signals within a\n"
      "second of each other are one request; another one later stops the peer at once).\n"
      "Exit codes: 0 done or stopped, 1 failure, 2 bad flags, 3 the training diverged (the loss or the\n"
      "partner distance blew up; the metrics file has a \"diverged\" record saying where it began).");
  return cmd;
}

int run_peer(const PeerConfig& given) {
  PeerConfig cfg = given;
  try {
    expand_per_peer_paths(cfg);
    validate(cfg);
    // A device this machine cannot give fails now, before any data is loaded.
    choose_device(parse_device(cfg.train.device), local_rank_from_environment(std::max(cfg.network.rank, 0)));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hearsay peer: %s\n", e.what());
    return 2;
  }
  g_stop.store(false);
  // A file-size limit (RLIMIT_FSIZE, as a full disk is emulated) fails the write that
  // crosses it, which the peer survives (a checkpoint keeps its previous one); its default
  // action would kill the peer instead.
  std::signal(SIGXFSZ, SIG_IGN);
  // SIGINT/SIGTERM ask the peer to finish its step, save and say bye; a second request (a
  // second or more after the first: copies sent together are one) stops a peer that seems
  // stuck at once.
  StopSignals signals(on_stop_signal, /*second_ends_process=*/true);
  try {
    PeerProcess peer(cfg, g_stop);
    return peer.run();
  } catch (const TrainingDiverged& e) {
    std::fprintf(
        stderr, "hearsay peer: %s; a lower --lr (or, if its partners diverged first, their logs) says more\n",
        e.what());
    return 3;
  } catch (const DataError& e) {
    std::fprintf(stderr, "hearsay peer: %s\n", e.what());
  } catch (const PeerStartError& e) {
    std::fprintf(stderr, "hearsay peer: %s\n", e.what());
  } catch (const transport::PeerError& e) {
    std::fprintf(stderr, "hearsay peer: lost a peer the algorithm cannot train without: %s\n", e.what());
  } catch (const transport::TransportError& e) {
    std::fprintf(stderr, "hearsay peer: %s\n", e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hearsay peer: %s\n", e.what());
  }
  return 1;
}

}  // namespace hearsay
