// CurveZMQ key files: each peer has a key pair in its own directory (peer.secret, kept
// private, and peer.pub, shared), and an "authorized" directory holding the peer.pub files
// of every peer it accepts, each renamed after that peer (alice.pub, bob.pub, ...).
//
// The files are text in the spirit of ZeroMQ's zcert format, one `name = "value"` pair
// per line, '#' comment lines and blank lines allowed:
//
//   # hearsay CURVE public key (share this file; put it in other peers' --authorized directory)
//   public-key = "<40 Z85 characters>"
//
// peer.secret holds both `public-key` and `secret-key`. Anything else is refused with a
// KeyError naming the file and line.
#pragma once
#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

namespace hearsay::transport {

class KeyError : public std::runtime_error {
 public:
  using runtime_error::runtime_error;
};

inline constexpr std::size_t kCurveKeyBytes = 32;
inline constexpr std::size_t kCurveKeyZ85Chars = 40;
inline constexpr const char* kPublicKeyFile = "peer.pub";
inline constexpr const char* kSecretKeyFile = "peer.secret";

struct CurveKeyPair {
  std::string public_z85, secret_z85;  // 40-character Z85 strings
};

// A fresh key pair from libzmq (libsodium). KeyError when libzmq lacks CURVE support.
CurveKeyPair generate_curve_keypair();

// Writes DIR/peer.pub (public key, mode 0644) and DIR/peer.secret (secret + public, mode
// 0600), creating DIR (0700) if needed. Each file is written to a temporary file, synced
// and renamed into place, so a crash never leaves a partial key file. Refuses to replace
// existing keys unless overwrite is true (KeyError saying to pass --force). KeyError too
// when the keys are not valid Z85 or the public key does not belong to the secret key.
void write_keypair(const std::filesystem::path& dir, const CurveKeyPair& keys, bool overwrite);

// Loads DIR/peer.secret (which also holds the public key). KeyError naming the file when
// it is missing, unreadable, malformed, holds an invalid key or a public key that does not
// belong to the secret key, or is accessible by group or others (then the message says to
// chmod 600 it).
CurveKeyPair load_keypair(const std::filesystem::path& dir);

// The public key in a peer.pub file (e.g. the one a --join peer shares). KeyError naming the
// file when it is missing, unreadable, malformed or holds a secret key.
std::string load_public_key(const std::filesystem::path& file);

// Every *.pub file in a directory is one authorized public key, named by its file stem.
struct AuthorizedKeys {
  std::map<std::string, std::string> name_by_key;  // Z85 public key -> name (file stem)
  bool contains(const std::string& z85) const;
  std::string name_of(const std::string& z85) const;  // "" when unknown
};
// KeyError when DIR is missing or not a directory, a .pub file is malformed, two files
// hold the same key, or there is no .pub file at all (nobody could connect).
AuthorizedKeys load_authorized(const std::filesystem::path& dir);

// Binary (32-byte) <-> Z85 (40 characters). binary_from_z85 returns nullopt for a string
// of the wrong length or one that is not valid Z85.
std::string z85_from_binary(std::span<const std::uint8_t, 32> key);
std::optional<std::array<std::uint8_t, 32>> binary_from_z85(std::string_view z85);

}  // namespace hearsay::transport
