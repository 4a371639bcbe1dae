#include "gossip/network/transport/keys.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "base/atomic_file.hpp"

namespace hearsay::transport {

namespace {

namespace fs = std::filesystem;

// Key files are a few hundred bytes; anything much larger is not one, and is not read.
constexpr std::size_t kMaxKeyFileBytes = 64 * 1024;

constexpr std::string_view kZ85Alphabet =
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

constexpr const char* kPublicHeader =
    "# hearsay CURVE public key (share this file; put it in other peers' --authorized directory)\n";
constexpr const char* kSecretHeader =
    "# hearsay CURVE secret key: keep this file private (mode 0600), never copy or share it.\n"
    "# The public key below is also in peer.pub next to it, the file to share.\n";

std::string in_quotes(const fs::path& p) { return "'" + p.string() + "'"; }
std::string errno_text() { return std::strerror(errno); }

// Owns a file descriptor.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Wipes a buffer that held secret key text before its memory is released.
class WipeOnExit {
 public:
  explicit WipeOnExit(std::string& s) : s_(s) {}
  ~WipeOnExit() { ::explicit_bzero(s_.data(), s_.size()); }
  WipeOnExit(const WipeOnExit&) = delete;
  WipeOnExit& operator=(const WipeOnExit&) = delete;

 private:
  std::string& s_;
};

bool is_z85_key(std::string_view s) {
  return s.size() == kCurveKeyZ85Chars && std::all_of(s.begin(), s.end(), [](char c) {
           return kZ85Alphabet.find(c) != std::string_view::npos;
         });
}

// Reads a whole key file. With private_only, refuses a file that group or others may
// access; the mode is checked on the descriptor that is then read, so a file swapped in
// between the check and the read cannot slip through.
std::string read_key_file(const fs::path& path, bool private_only, const std::string& missing_hint) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
  if (fd.get() < 0) {
    if (errno == ENOENT) throw KeyError(in_quotes(path) + " does not exist" + missing_hint);
    throw KeyError("cannot open " + in_quotes(path) + ": " + errno_text());
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw KeyError("cannot stat " + in_quotes(path) + ": " + errno_text());
  if (!S_ISREG(st.st_mode)) throw KeyError(in_quotes(path) + " is not a regular file");
  if (private_only && (st.st_mode & 0077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw KeyError(in_quotes(path) + " holds a secret key but is accessible by group or others (mode " +
                   mode + "); make it private with: chmod 600 " + in_quotes(path));
  }
  if (static_cast<std::uint64_t>(st.st_size) > kMaxKeyFileBytes)
    throw KeyError(in_quotes(path) + " is " + std::to_string(st.st_size) +
                   " bytes, too large to be a key file");
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t r = ::read(fd.get(), text.data() + got, text.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw KeyError("cannot read " + in_quotes(path) + ": " + errno_text());
    if (r == 0) break;  // the file shrank while being read
    got += static_cast<std::size_t>(r);
  }
  text.resize(got);
  return text;
}

std::string_view trim(std::string_view s) {
  const auto not_space = [](char c) { return c != ' ' && c != '\t' && c != '\r'; };
  while (!s.empty() && !not_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && !not_space(s.back())) s.remove_suffix(1);
  return s;
}

struct ParsedKeyFile {
  std::optional<std::string> public_key, secret_key;
};

// Whether text looks like a field name (letters, digits, '-', '_'; at most 32), as
// opposed to a fragment of key text, which a message must not repeat.
bool is_field_name(std::string_view text) {
  return !text.empty() && text.size() <= 32 && std::all_of(text.begin(), text.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  });
}

// Parses `name = "value"` lines. Messages name the file and line but never echo the
// text, which may be a secret key.
ParsedKeyFile parse_key_file(const fs::path& path, std::string_view text) {
  ParsedKeyFile parsed;
  std::size_t line_no = 0;
  while (!text.empty()) {
    const std::size_t eol = text.find('\n');
    const std::string_view line = trim(text.substr(0, eol));
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    ++line_no;
    if (line.empty() || line.front() == '#') continue;
    const std::string where = in_quotes(path) + " line " + std::to_string(line_no) + ": ";
    const std::size_t eq = line.find('=');
    if (eq == std::string_view::npos)
      throw KeyError(where + "expected 'public-key = \"...\"' or 'secret-key = \"...\"'");
    const std::string_view name = trim(line.substr(0, eq));
    const std::string_view value = trim(line.substr(eq + 1));
    std::optional<std::string>* slot = nullptr;
    if (name == "public-key") {
      slot = &parsed.public_key;
    } else if (name == "secret-key") {
      slot = &parsed.secret_key;
    } else if (is_field_name(name)) {
      throw KeyError(where + "unknown field '" + std::string(name) + "' (expected public-key or secret-key)");
    } else {
      // Z85 keys contain '=', so a key written without its name splits there: the part
      // before it is key text, never to be echoed.
      throw KeyError(where + "expected 'public-key = \"...\"' or 'secret-key = \"...\"'");
    }
    if (slot->has_value()) throw KeyError(where + std::string(name) + " appears twice");
    if (value.size() < 2 || value.front() != '"' || value.back() != '"')
      throw KeyError(where + "the value of " + std::string(name) + " must be in double quotes");
    const std::string_view key = value.substr(1, value.size() - 2);
    if (!binary_from_z85(key))
      throw KeyError(where + std::string(name) + " is not a valid CURVE key (" +
                     std::to_string(kCurveKeyZ85Chars) + " Z85 characters expected, got " +
                     std::to_string(key.size()) + " characters" +
                     (key.size() == kCurveKeyZ85Chars ? " that do not decode" : "") + ")");
    *slot = std::string(key);
  }
  return parsed;
}

// The public key that belongs to a secret key (both Z85).
std::string public_of(const std::string& secret_z85) {
  char public_z85[kCurveKeyZ85Chars + 1] = {};
  if (zmq_curve_public(public_z85, secret_z85.c_str()) != 0)
    throw KeyError(std::string("cannot derive a CURVE public key: ") + zmq_strerror(zmq_errno()) +
                   " (is libzmq built with CURVE support?)");
  return std::string(public_z85, kCurveKeyZ85Chars);
}

// A key file through AtomicFileWriter, its errors as KeyErrors: without overwrite, an
// existing target is refused (atomically: the link fails) with what to do instead.
void write_key_file(const fs::path& target, const std::string& content, mode_t mode, bool overwrite) {
  try {
    write_file_atomically(target, content, mode,
                          overwrite ? AtomicFileWriter::Replace::yes : AtomicFileWriter::Replace::no);
  } catch (const AtomicFileError& e) {
    if (e.error() == EEXIST && !overwrite)
      throw KeyError(in_quotes(target) + " already exists; pass --force to replace the key pair");
    throw KeyError(std::string("cannot write key file ") + in_quotes(target) + ": " + e.what());
  }
}

}  // namespace

std::string z85_from_binary(std::span<const std::uint8_t, 32> key) {
  char z85[kCurveKeyZ85Chars + 1] = {};
  if (zmq_z85_encode(z85, key.data(), key.size()) == nullptr)
    throw KeyError(std::string("Z85 encoding failed: ") + zmq_strerror(zmq_errno()));
  return std::string(z85, kCurveKeyZ85Chars);
}

std::optional<std::array<std::uint8_t, 32>> binary_from_z85(std::string_view z85) {
  // The alphabet check also rules out embedded NULs, which would cut the C string short.
  if (!is_z85_key(z85)) return std::nullopt;
  char text[kCurveKeyZ85Chars + 1] = {};
  std::copy(z85.begin(), z85.end(), text);
  std::array<std::uint8_t, 32> key{};
  // libzmq also refuses 5-character groups whose value exceeds 32 bits.
  if (zmq_z85_decode(key.data(), text) == nullptr) return std::nullopt;
  return key;
}

CurveKeyPair generate_curve_keypair() {
  char public_z85[kCurveKeyZ85Chars + 1] = {};
  char secret_z85[kCurveKeyZ85Chars + 1] = {};
  if (zmq_curve_keypair(public_z85, secret_z85) != 0)
    throw KeyError(std::string("cannot generate a CURVE key pair: ") + zmq_strerror(zmq_errno()) +
                   " (libzmq must be built with CURVE support, e.g. Debian's libzmq5)");
  CurveKeyPair keys{std::string(public_z85, kCurveKeyZ85Chars), std::string(secret_z85, kCurveKeyZ85Chars)};
  ::explicit_bzero(secret_z85, sizeof secret_z85);
  return keys;
}

void write_keypair(const fs::path& dir, const CurveKeyPair& keys, bool overwrite) {
  if (!binary_from_z85(keys.public_z85)) throw KeyError("refusing to write an invalid CURVE public key");
  if (!binary_from_z85(keys.secret_z85)) throw KeyError("refusing to write an invalid CURVE secret key");
  if (public_of(keys.secret_z85) != keys.public_z85)
    throw KeyError("refusing to write a key pair whose public key does not belong to its secret key");

  std::error_code ec;
  const fs::file_status status = fs::status(dir, ec);
  if (status.type() == fs::file_type::not_found) {
    fs::create_directories(dir, ec);
    if (!ec) fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace, ec);
    if (ec) throw KeyError("cannot create key directory " + in_quotes(dir) + ": " + ec.message());
  } else if (ec) {
    throw KeyError("cannot access key directory " + in_quotes(dir) + ": " + ec.message());
  } else if (status.type() != fs::file_type::directory) {
    throw KeyError(in_quotes(dir) + " exists and is not a directory");
  }

  const fs::path secret_path = dir / kSecretKeyFile;
  const fs::path public_path = dir / kPublicKeyFile;
  if (!overwrite) {
    // Checked up front so that neither file is written when either exists; the link in
    // write_key_file still refuses atomically if one appears meanwhile.
    for (const fs::path& p : {secret_path, public_path})
      if (fs::symlink_status(p, ec).type() != fs::file_type::not_found)
        throw KeyError(in_quotes(p) + " already exists; pass --force to replace the key pair");
  }
  std::string secret_text = std::string(kSecretHeader) + "public-key = \"" + keys.public_z85 +
                            "\"\nsecret-key = \"" + keys.secret_z85 + "\"\n";
  WipeOnExit wipe(secret_text);
  // The secret file first: it also holds the public key, so an interruption between the
  // two never leaves a public key without its secret.
  write_key_file(secret_path, secret_text, 0600, overwrite);
  write_key_file(public_path, std::string(kPublicHeader) + "public-key = \"" + keys.public_z85 + "\"\n", 0644,
                 overwrite);
}

CurveKeyPair load_keypair(const fs::path& dir) {
  const fs::path path = dir / kSecretKeyFile;
  std::string text =
      read_key_file(path, true, ": create a key pair with 'hearsay keygen --out " + dir.string() + "'");
  WipeOnExit wipe(text);
  ParsedKeyFile parsed = parse_key_file(path, text);
  if (!parsed.secret_key) throw KeyError(in_quotes(path) + " has no secret-key line");
  if (!parsed.public_key) throw KeyError(in_quotes(path) + " has no public-key line");
  if (public_of(*parsed.secret_key) != *parsed.public_key)
    throw KeyError(in_quotes(path) +
                   ": its public-key does not belong to its secret-key; the file was edited or "
                   "mixed up with another peer's; create a new pair with 'hearsay keygen --force'");
  return CurveKeyPair{std::move(*parsed.public_key), std::move(*parsed.secret_key)};
}

std::string load_public_key(const fs::path& file) {
  ParsedKeyFile parsed = parse_key_file(file, read_key_file(file, false, ""));
  if (parsed.secret_key) {
    ::explicit_bzero(parsed.secret_key->data(), parsed.secret_key->size());
    throw KeyError(in_quotes(file) +
                   " holds a secret-key line: give the peer.pub file, which is the one to share");
  }
  if (!parsed.public_key) throw KeyError(in_quotes(file) + " has no public-key line");
  return *parsed.public_key;
}

bool AuthorizedKeys::contains(const std::string& z85) const { return name_by_key.count(z85) != 0; }

std::string AuthorizedKeys::name_of(const std::string& z85) const {
  const auto it = name_by_key.find(z85);
  return it == name_by_key.end() ? std::string() : it->second;
}

AuthorizedKeys load_authorized(const fs::path& dir) {
  std::error_code ec;
  const fs::file_status status = fs::status(dir, ec);
  if (status.type() == fs::file_type::not_found)
    throw KeyError(
        "authorized-keys directory " + in_quotes(dir) +
        " does not exist: create it and copy there the peer.pub of every peer to accept, named after "
        "that peer (e.g. alice.pub)");
  if (ec) throw KeyError("cannot access authorized-keys directory " + in_quotes(dir) + ": " + ec.message());
  if (status.type() != fs::file_type::directory)
    throw KeyError("authorized-keys path " + in_quotes(dir) + " is not a directory");

  std::vector<fs::path> files;
  fs::directory_iterator it(dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const fs::path& p = it->path();
    std::error_code type_ec;
    if (p.extension() == ".pub" && it->is_regular_file(type_ec)) files.push_back(p);
  }
  if (ec) throw KeyError("cannot list authorized-keys directory " + in_quotes(dir) + ": " + ec.message());
  if (files.empty())
    throw KeyError("authorized-keys directory " + in_quotes(dir) +
                   " holds no *.pub file, so no peer could connect: copy there the peer.pub of every peer to "
                   "accept, named after that peer (e.g. alice.pub)");
  std::sort(files.begin(), files.end());  // deterministic messages about duplicates

  AuthorizedKeys keys;
  std::map<std::string, fs::path> file_by_key;
  for (const fs::path& p : files) {
    ParsedKeyFile parsed = parse_key_file(p, read_key_file(p, false, ""));
    if (parsed.secret_key) {
      ::explicit_bzero(parsed.secret_key->data(), parsed.secret_key->size());
      throw KeyError(
          in_quotes(p) +
          " holds a secret-key line: an authorized-keys directory takes public keys only (peer.pub "
          "files); delete this copy and make a new key pair for that peer, since its secret was shared");
    }
    if (!parsed.public_key) throw KeyError(in_quotes(p) + " has no public-key line");
    const auto [existing, inserted] = file_by_key.emplace(*parsed.public_key, p);
    if (!inserted)
      throw KeyError(in_quotes(existing->second) + " and " + in_quotes(p) +
                     " hold the same public key; keep one file per peer");
    keys.name_by_key.emplace(*parsed.public_key, p.stem().string());
  }
  return keys;
}

}  // namespace hearsay::transport
