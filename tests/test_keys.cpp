// CURVE key files: Z85 helpers, writing and loading key pairs, authorized-key
// directories, and `hearsay keygen` run as the real binary (HEARSAY_BINARY).
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gossip/network/transport/keys.hpp"
#include "test_support.hpp"

using namespace hearsay::transport;
using namespace hearsay::testing;
namespace fs = std::filesystem;

namespace {

void write_text(const fs::path& p, const std::string& text,
                fs::perms mode = fs::perms::owner_read | fs::perms::owner_write) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
  fs::permissions(p, mode, fs::perm_options::replace);
}

unsigned mode_of(const fs::path& p) {
  struct stat st {};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  return static_cast<unsigned>(st.st_mode & 07777);
}

std::set<std::string> names_in(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

// The message of the KeyError that `f` throws ("" if it throws none).
template <class F>
std::string key_error_of(F&& f) {
  try {
    f();
  } catch (const KeyError& e) {
    return e.what();
  }
  return "";
}

std::string secret_file_text(const CurveKeyPair& k) {
  return "public-key = \"" + k.public_z85 + "\"\nsecret-key = \"" + k.secret_z85 + "\"\n";
}

}  // namespace

TEST_CASE("Z85 helpers encode the RFC 32 vector and reject bad text", "[keys]") {
  // RFC 32's test vector: 86 4F D2 6F B5 59 F7 5B is "HelloWorld"; Z85 encodes each
  // 4-byte group on its own, so four copies encode to four copies.
  const std::uint8_t hello[8] = {0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B};
  std::array<std::uint8_t, 32> key{};
  for (std::size_t i = 0; i < key.size(); ++i) key[i] = hello[i % 8];
  CHECK(z85_from_binary(key) == "HelloWorldHelloWorldHelloWorldHelloWorld");
  const auto decoded = binary_from_z85("HelloWorldHelloWorldHelloWorldHelloWorld");
  REQUIRE(decoded.has_value());
  CHECK(*decoded == key);

  CHECK_FALSE(binary_from_z85(""));
  CHECK_FALSE(binary_from_z85("HelloWorldHelloWorldHelloWorldHelloWorl"));    // 39 characters
  CHECK_FALSE(binary_from_z85("HelloWorldHelloWorldHelloWorldHelloWorldH"));  // 41
  CHECK_FALSE(binary_from_z85("HelloWorldHelloWorldHelloWorldHelloWorl "));   // space is not Z85
  CHECK_FALSE(binary_from_z85("HelloWorldHelloWorldHelloWorldHelloWorl\""));
  CHECK_FALSE(binary_from_z85("HelloWorldHelloWorldHelloWorldHello#####"));  // group above 2^32
  CHECK_FALSE(binary_from_z85(std::string_view("HelloWorldHelloWorldHelloWorld\0elloWorld", 40)));
}

TEST_CASE("generated key pairs are valid, distinct and consistent", "[keys]") {
  const CurveKeyPair a = generate_curve_keypair(), b = generate_curve_keypair();
  CHECK(a.public_z85.size() == 40);
  CHECK(a.secret_z85.size() == 40);
  CHECK(binary_from_z85(a.public_z85).has_value());
  CHECK(binary_from_z85(a.secret_z85).has_value());
  CHECK(a.public_z85 != b.public_z85);
  CHECK(a.secret_z85 != b.secret_z85);
  const auto bin = binary_from_z85(a.public_z85);
  REQUIRE(bin.has_value());
  CHECK(z85_from_binary(*bin) == a.public_z85);
}

TEST_CASE("write_keypair and load_keypair round trip with private modes", "[keys]") {
  TempPath tmp;
  const fs::path dir = tmp.path() / "nested" / "keys";
  const CurveKeyPair keys = generate_curve_keypair();
  write_keypair(dir, keys, false);

  CHECK(mode_of(dir) == 0700);
  CHECK(mode_of(dir / "peer.secret") == 0600);
  CHECK(mode_of(dir / "peer.pub") == 0644);
  CHECK(names_in(dir) == std::set<std::string>{"peer.pub", "peer.secret"});  // no temporary files left
  const std::string pub = read_file(dir / "peer.pub");
  CHECK(contains(pub, "public-key = \"" + keys.public_z85 + "\""));
  CHECK_FALSE(contains(pub, keys.secret_z85));
  CHECK(pub.front() == '#');  // the comment saying what the file is

  const CurveKeyPair loaded = load_keypair(dir);
  CHECK(loaded.public_z85 == keys.public_z85);
  CHECK(loaded.secret_z85 == keys.secret_z85);
}

TEST_CASE("write_keypair refuses to replace keys unless told to", "[keys]") {
  TempPath tmp;
  const CurveKeyPair first = generate_curve_keypair(), second = generate_curve_keypair();
  write_keypair(tmp.path(), first, false);
  const std::string secret_before = read_file(tmp.path() / "peer.secret");
  const std::string message = key_error_of([&] { write_keypair(tmp.path(), second, false); });
  CHECK(contains(message, "--force"));
  CHECK(contains(message, "peer.secret"));
  CHECK(read_file(tmp.path() / "peer.secret") == secret_before);
  CHECK(names_in(tmp.path()) == std::set<std::string>{"peer.pub", "peer.secret"});

  // Only one of the two files present still counts as existing keys.
  fs::remove(tmp.path() / "peer.secret");
  CHECK(contains(key_error_of([&] { write_keypair(tmp.path(), second, false); }), "peer.pub"));

  write_keypair(tmp.path(), second, true);
  CHECK(load_keypair(tmp.path()).public_z85 == second.public_z85);
  CHECK(mode_of(tmp.path() / "peer.secret") == 0600);
  CHECK(names_in(tmp.path()) == std::set<std::string>{"peer.pub", "peer.secret"});
}

TEST_CASE("write_keypair refuses invalid or mismatched keys and non-directories", "[keys]") {
  TempPath tmp;
  const CurveKeyPair a = generate_curve_keypair(), b = generate_curve_keypair();
  CHECK_THROWS_AS(write_keypair(tmp.path(), CurveKeyPair{a.public_z85.substr(1), a.secret_z85}, false),
                  KeyError);
  CHECK_THROWS_AS(write_keypair(tmp.path(), CurveKeyPair{a.public_z85, "not a key"}, false), KeyError);
  CHECK(contains(key_error_of([&] {
                   write_keypair(tmp.path(), CurveKeyPair{a.public_z85, b.secret_z85}, false);
                 }),
                 "does not belong"));
  CHECK_FALSE(fs::exists(tmp.path()));
  write_text(tmp.path() / "file", "x");
  CHECK(contains(key_error_of([&] { write_keypair(tmp.path() / "file", a, false); }), "not a directory"));
}

TEST_CASE("load_keypair refuses missing, shared and malformed secret files", "[keys]") {
  TempPath tmp;
  const fs::path secret = tmp.path() / "peer.secret";
  const CurveKeyPair a = generate_curve_keypair(), b = generate_curve_keypair();

  std::string message = key_error_of([&] { load_keypair(tmp.path()); });
  CHECK(contains(message, secret.string()));
  CHECK(contains(message, "hearsay keygen"));

  write_text(secret, secret_file_text(a),
             fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read);
  message = key_error_of([&] { load_keypair(tmp.path()); });
  CHECK(contains(message, "chmod 600"));
  CHECK(contains(message, "0644"));
  fs::permissions(secret, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read,
                  fs::perm_options::replace);
  CHECK(contains(key_error_of([&] { load_keypair(tmp.path()); }), "chmod 600"));

  // Comments, blank lines, spacing and CRLF line ends are fine.
  write_text(secret, "# a comment\r\n\r\n  public-key=\"" + a.public_z85 + "\"  \r\nsecret-key =  \"" +
                         a.secret_z85 + "\"\r\n");
  CHECK(load_keypair(tmp.path()).secret_z85 == a.secret_z85);

  struct Case {
    std::string text, expect;  // file content, a part of the message
  };
  const std::string pub_line = "public-key = \"" + a.public_z85 + "\"\n";
  const std::vector<Case> cases{
      {pub_line + "secret-key " + a.secret_z85 + "\n", "line 2"},           // no '='
      {pub_line + "secret-key = " + a.secret_z85 + "\n", "double quotes"},  // unquoted
      {pub_line + "secret-key = \"" + a.secret_z85.substr(1) + "\"\n", "got 39 characters"},
      {pub_line + "secret-key = \"" + a.secret_z85 + "x\"\n", "got 41 characters"},
      {pub_line + "secret-key = \"" + a.secret_z85.substr(0, 39) + " \"\n", "do not decode"},
      {pub_line + "colour = \"blue\"\n", "unknown field 'colour'"},
      {pub_line + pub_line + "secret-key = \"" + a.secret_z85 + "\"\n", "line 2: public-key appears twice"},
      {pub_line, "no secret-key"},
      {"secret-key = \"" + a.secret_z85 + "\"\n", "no public-key"},
      {"public-key = \"" + b.public_z85 + "\"\nsecret-key = \"" + a.secret_z85 + "\"\n", "does not belong"},
      {"", "no secret-key"},
  };
  for (const auto& c : cases) {
    write_text(secret, c.text);
    message = key_error_of([&] { load_keypair(tmp.path()); });
    INFO("file:\n" << c.text << "message: " << message);
    CHECK(contains(message, c.expect));
    CHECK(contains(message, secret.string()));
    CHECK_FALSE(contains(message, a.secret_z85.substr(0, 20)));  // never echo the secret
  }
}

TEST_CASE("load_authorized maps every .pub file's key to its name", "[keys]") {
  TempPath tmp;
  const fs::path dir = tmp.path() / "authorized";
  std::vector<CurveKeyPair> peers;
  for (const char* name : {"alice", "bob", "carol"}) {
    peers.push_back(generate_curve_keypair());
    const fs::path own = tmp.path() / name;
    write_keypair(own, peers.back(), false);
    fs::create_directories(dir);
    fs::copy_file(own / "peer.pub", dir / (std::string(name) + ".pub"));
  }
  write_text(dir / "README.txt", "not a key, ignored");
  const AuthorizedKeys keys = load_authorized(dir);
  CHECK(keys.name_by_key.size() == 3);
  CHECK(keys.contains(peers[1].public_z85));
  CHECK(keys.name_of(peers[0].public_z85) == "alice");
  CHECK(keys.name_of(peers[1].public_z85) == "bob");
  CHECK(keys.name_of(peers[2].public_z85) == "carol");
  const CurveKeyPair stranger = generate_curve_keypair();
  CHECK_FALSE(keys.contains(stranger.public_z85));
  CHECK(keys.name_of(stranger.public_z85).empty());
  CHECK_FALSE(keys.contains(peers[0].secret_z85));
}

TEST_CASE("load_authorized refuses missing, empty and bad directories", "[keys]") {
  TempPath tmp;
  const fs::path dir = tmp.path();
  CHECK(contains(key_error_of([&] { load_authorized(dir); }), "does not exist"));
  fs::create_directories(dir);
  CHECK(contains(key_error_of([&] { load_authorized(dir); }), "no *.pub file"));
  write_text(dir / "notes.txt", "nothing");
  CHECK(contains(key_error_of([&] { load_authorized(dir); }), "no *.pub file"));
  CHECK(contains(key_error_of([&] { load_authorized(dir / "notes.txt"); }), "not a directory"));

  const CurveKeyPair a = generate_curve_keypair(), b = generate_curve_keypair();
  write_text(dir / "alice.pub", "public-key = \"" + a.public_z85 + "\"\n");
  write_text(dir / "bob.pub", "# bob\npublic-key = \"" + b.public_z85.substr(3) + "\"\n");
  std::string message = key_error_of([&] { load_authorized(dir); });
  CHECK(contains(message, (dir / "bob.pub").string()));
  CHECK(contains(message, "line 2"));
  CHECK(contains(message, "got 37 characters"));

  write_text(dir / "bob.pub", secret_file_text(b));
  CHECK(contains(key_error_of([&] { load_authorized(dir); }), "secret-key"));

  write_text(dir / "bob.pub", "# nothing here\n");
  CHECK(contains(key_error_of([&] { load_authorized(dir); }), "no public-key"));

  write_text(dir / "bob.pub", "public-key = \"" + a.public_z85 + "\"\n");
  message = key_error_of([&] { load_authorized(dir); });
  CHECK(contains(message, "same public key"));
  CHECK(contains(message, "alice.pub"));

  write_text(dir / "bob.pub", "public-key = \"" + b.public_z85 + "\"\n");
  CHECK(load_authorized(dir).name_of(b.public_z85) == "bob");
}

TEST_CASE("keygen: writes a key pair, refuses to replace it without --force", "[keys][cli][process]") {
  TempPath tmp;
  const fs::path dir = tmp.path() / "keys";
  CliResult r = run_hearsay({"keygen", "--out", dir.string()});
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  REQUIRE(r.status == 0);
  CHECK(contains(r.out, (dir / "peer.pub").string()));
  CHECK(contains(r.out, (dir / "peer.secret").string()));
  CHECK(contains(r.out, "--authorized"));
  const CurveKeyPair first = load_keypair(dir);
  CHECK(contains(r.out, first.public_z85));
  CHECK_FALSE(contains(r.out + r.err, first.secret_z85));
  CHECK(mode_of(dir / "peer.secret") == 0600);
  CHECK(load_authorized(dir).name_of(first.public_z85) == "peer");

  r = run_hearsay({"keygen", "--out", dir.string()});
  CHECK(r.status == 1);
  CHECK(contains(r.err, "--force"));
  CHECK(load_keypair(dir).secret_z85 == first.secret_z85);

  r = run_hearsay({"keygen", "--out", dir.string(), "--force"});
  CHECK(r.status == 0);
  CHECK(load_keypair(dir).public_z85 != first.public_z85);
}

TEST_CASE("keygen: a missing --out is a usage error", "[keys][cli][process]") {
  const CliResult r = run_hearsay({"keygen"});
  INFO("stdout:\n" << r.out << "stderr:\n" << r.err);
  CHECK(r.status == 2);
  CHECK(contains(r.out + r.err, "--out"));
}
