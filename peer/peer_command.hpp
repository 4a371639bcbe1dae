// `hearsay peer`: what users start on each machine of a training run (peer_process.hpp
// is the peer itself; this is its command line, signals and error reporting).
#pragma once
#include <CLI/CLI.hpp>

#include "peer/peer_config.hpp"

namespace hearsay {

// Registers the subcommand and its flags (peer_config.hpp); cfg is filled in when parsed.
CLI::App* add_peer_command(CLI::App& app, PeerConfig& cfg);
// Runs a peer. Returns the process exit code: 0 when training finished or a SIGINT or
// SIGTERM stopped it cleanly, 1 on a failure, 2 for settings that cannot run.
int run_peer(const PeerConfig& cfg);

}  // namespace hearsay
