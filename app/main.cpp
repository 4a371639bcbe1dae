// hearsay: gossip-based decentralized training. One executable, several subcommands.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "base/crash_report.hpp"
#include "gossip/network/transport/allocator_policy.hpp"
#include "peer/keygen_command.hpp"
#include "peer/peer_command.hpp"
#include "peer/topology_command.hpp"
#include "peer/train_command.hpp"
#include "peer/watch_command.hpp"
#include "sim/sim_command.hpp"

int main(int argc, char** argv) {
  // A crash leaves the signal and the stack in stderr (a peer's log) before the process dies.
  hearsay::install_crash_report();
  // Before any thread exists: received parameter messages reuse paged-in heap memory.
  hearsay::transport::keep_large_allocations_paged_in();
  CLI::App app{"hearsay: decentralized deep-learning training by gossip"};
  app.require_subcommand(1);
  app.set_version_flag("--version,-V", "hearsay 0.1.0");
  // The error alone: the hint to run --help follows once, below.
  app.failure_message([](const CLI::App*, const CLI::Error& e) { return std::string(e.what()) + "\n"; });
  hearsay::TrainOptions train;
  CLI::App* train_cmd = hearsay::add_train_command(app, train);
  hearsay::KeygenOptions keygen;
  CLI::App* keygen_cmd = hearsay::add_keygen_command(app, keygen);
  hearsay::PeerConfig peer;
  CLI::App* peer_cmd = hearsay::add_peer_command(app, peer);
  hearsay::TopologyOptions topology;
  CLI::App* topology_cmd = hearsay::add_topology_command(app, topology);
  hearsay::sim::SimConfig sim;
  CLI::App* sim_cmd = hearsay::sim::add_sim_command(app, sim);
  hearsay::WatchOptions watch;
  CLI::App* watch_cmd = hearsay::add_watch_command(app, watch);
  // A first word that is no command: name it (CLI11 says "A subcommand is required").
  if (argc > 1 && argv[1][0] != '-') {
    const std::string word = argv[1];
    std::string names;
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      names += (names.empty() ? "" : ", ") + sub->get_name();
      known = known || sub->get_name() == word;
    }
    if (!known) {
      std::fprintf(stderr, "hearsay: '%s' is not a command; the commands are %s%s\n", word.c_str(),
                   names.c_str(), word == "version" ? " (the version: hearsay --version)" : "");
      std::fprintf(stderr, "Run 'hearsay --help' or 'hearsay <command> --help' for usage.\n");
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version are "errors" with exit code 0; anything else is a usage error.
    const int code = app.exit(e);
    if (code != 0) std::fprintf(stderr, "Run 'hearsay --help' or 'hearsay <command> --help' for usage.\n");
    return code == 0 ? 0 : 2;
  }
  if (train_cmd->parsed()) return hearsay::run_train(train);
  if (peer_cmd->parsed() && peer.print_config) {
    std::fputs(hearsay::print_config(*peer_cmd).c_str(), stdout);
    return 0;
  }
  if (peer_cmd->parsed()) return hearsay::run_peer(peer);
  if (keygen_cmd->parsed()) return hearsay::run_keygen(keygen);
  if (topology_cmd->parsed()) return hearsay::run_topology(topology);
  if (sim_cmd->parsed()) return hearsay::sim::run_sim(sim, *sim_cmd);
  if (watch_cmd->parsed()) return hearsay::run_watch(watch);
  return 2;
}
