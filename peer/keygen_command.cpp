#include "peer/keygen_command.hpp"

#include <cstdio>
#include <filesystem>

#include "gossip/network/transport/keys.hpp"

namespace hearsay {

CLI::App* add_keygen_command(CLI::App& app, KeygenOptions& o) {
  CLI::App* cmd =
      app.add_subcommand("keygen", "Create this peer's CURVE key pair (peer.secret and peer.pub)");
  cmd->add_option("--out", o.out, "Key directory to write peer.secret (private) and peer.pub (to share) into")
      ->required();
  cmd->add_flag("--force", o.force, "Replace an existing key pair in the directory");
  cmd->footer(
      "Examples:\n"
      "  hearsay keygen --out keys/a        (then share keys/a/peer.pub: copy it into the other peers'\n"
      "                                      --authorized directory as a.pub)\n"
      "  hearsay keygen --out keys/a --force   (a new pair: the old public key no longer works)");
  return cmd;
}

int run_keygen(const KeygenOptions& o) {
  try {
    const std::filesystem::path dir(o.out);
    const transport::CurveKeyPair keys = transport::generate_curve_keypair();
    transport::write_keypair(dir, keys, o.force);
    const std::string secret_path = (dir / transport::kSecretKeyFile).string();
    const std::string public_path = (dir / transport::kPublicKeyFile).string();
    std::printf(
        "hearsay keygen: wrote %s (secret key, mode 0600: keep it private, never copy it)\n"
        "  and %s (public key %s)\n"
        "Next: copy %s into the --authorized directory of every peer that should accept this one,\n"
        "renamed after this peer (e.g. alice.pub): peers name it by that file name in their logs.\n",
        secret_path.c_str(), public_path.c_str(), keys.public_z85.c_str(), public_path.c_str());
    return 0;
  } catch (const transport::KeyError& e) {
    std::fprintf(stderr, "hearsay keygen: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hearsay keygen: %s\n", e.what());
    return 1;
  }
}

}  // namespace hearsay
