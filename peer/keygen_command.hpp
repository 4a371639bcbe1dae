// `hearsay keygen`: creates a peer's CURVE key pair for encrypted, authenticated gossip.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace hearsay {

struct KeygenOptions {
  std::string out;     // key directory: peer.secret and peer.pub are written there
  bool force = false;  // replace an existing key pair
};

// Registers the subcommand and its flags; the options are filled in when parsed.
CLI::App* add_keygen_command(CLI::App& app, KeygenOptions& options);
// Creates the key pair. Returns the process exit code (0 ok, 1 failure).
int run_keygen(const KeygenOptions& options);

}  // namespace hearsay
