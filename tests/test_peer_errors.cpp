// `hearsay peer` given something it cannot work with: each case ends with one clear
// message and a non-zero exit, never a hang or a crash.
#include <sys/socket.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "child_process.hpp"
#include "loopback_listener.hpp"
#include "test_support.hpp"

using namespace hearsay::testing;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

std::vector<std::string> base(std::vector<std::string> extra) {
  std::vector<std::string> args = {"peer",    "--insecure", "--data",    "synthetic",
                                   "--model", "mlp",        "--threads", "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// A TCP port on 127.0.0.1 that something else holds for as long as this object lives.
class HeldPort {
 public:
  HeldPort() { fd_ = listen_on_loopback(1, &port_); }
  ~HeldPort() { ::close(fd_); }
  HeldPort(const HeldPort&) = delete;
  HeldPort& operator=(const HeldPort&) = delete;
  int port() const { return port_; }

 private:
  int fd_ = -1;
  std::uint16_t port_ = 0;
};

}  // namespace

TEST_CASE("peer: a bad setting is refused before anything starts", "[peer][cli][process]") {
  const CliResult r = run_hearsay(base({"--listen", "tcp://127.0.0.1:7000", "--epochs", "0"}));
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Contains("--epochs"));
  const CliResult timing = run_hearsay(base({"--listen", "tcp://127.0.0.1:7000", "--dead-after", "1s"}));
  CHECK(timing.status == 2);
  CHECK_THAT(timing.err, Contains("--dead-after 1s must be longer than --suspect-after 3s"));
  TempPath config(".toml");
  std::ofstream(config.path()) << "[train]\nepoch = 3\n";
  const CliResult file = run_hearsay(base({"--listen", "tcp://127.0.0.1:7000", "--config", config.str()}));
  CHECK(file.status == 2);
  CHECK_THAT(file.err, Contains("did you mean 'train.epochs'"));
}

TEST_CASE("peer, train and sim: a missing dataset names the directory and what to do, and exits 1",
          "[peer][cli][process]") {
  TempPath missing, out;
  // The same failure, the same status: sim said 2, the status of a bad flag.
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"peer", "--insecure", "--listen", "tcp://127.0.0.1:*", "--id", "p", "--data", missing.str()},
           {"train", "--data", missing.str()},
           {"sim", "--peers", "2", "--data", missing.str(), "--out", out.str()}}) {
    INFO(args.front());
    const CliResult r = run_hearsay(args);
    CHECK(r.status == 1);
    CHECK_THAT(r.err, Contains("hearsay " + args.front() + ": data directory '" + missing.str() + "'"));
    CHECK_THAT(r.err, Contains("--data synthetic"));
  }
}

TEST_CASE("peer: a port in use is one message naming it", "[peer][cli][process]") {
  HeldPort held;
  const std::string listen = "tcp://127.0.0.1:" + std::to_string(held.port());
  const CliResult r = run_hearsay(base({"--listen", listen}));
  CHECK(r.status == 1);
  CHECK_THAT(r.err, Contains("cannot bind " + listen));
  CHECK_THAT(r.err, Contains("use another port"));
}

TEST_CASE("peer: a seed nobody answers at gives up after --join-timeout", "[peer][cli][process]") {
  HeldPort silent;  // accepts TCP connections but never speaks ZeroMQ
  const auto start = std::chrono::steady_clock::now();
  const CliResult r =
      run_hearsay(base({"--listen", "tcp://127.0.0.1:*", "--id", "joiner", "--join",
                        "tcp://127.0.0.1:" + std::to_string(silent.port()), "--join-timeout", "2s"}));
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(took >= 2s);  // it tried for the whole timeout; load can only make it later
  CHECK(took < 20s);  // a hang guard
  CHECK(r.status == 1);
  CHECK_THAT(r.err, Contains("could not join the run: no peer answered from tcp://127.0.0.1:" +
                             std::to_string(silent.port()) + " within 2s"));
  CHECK_THAT(r.err, Contains("reachable"));
}

TEST_CASE("peer: a joiner the run refuses ends at once with the reason: another model or run, an id taken",
          "[peer][cli][process]") {
  TempPath dir;
  std::filesystem::create_directories(dir.path());
  ChildProcess seed(base({"--listen", "tcp://127.0.0.1:*", "--id", "seed", "--epochs", "1000", "--ready-file",
                          dir.file("seed.ready")}),
                    dir.file("seed.out"), dir.file("seed.err"));
  const std::string address = await_ready(seed, dir.file("seed.ready"), "seed").address;
  ChildProcess member(base({"--listen", "tcp://127.0.0.1:*", "--id", "member", "--join", address, "--epochs",
                            "1000", "--ready-file", dir.file("member.ready")}),
                      dir.file("member.out"), dir.file("member.err"));
  const std::string member_address = await_ready(member, dir.file("member.ready"), "member").address;
  REQUIRE(eventually([&] { return contains(seed.err(), "member 'member' joined"); }, 20s));

  // Each would retry for the whole --join-timeout without the seed's answer; with it, it
  // ends in well under that, with the seed's reason in its own terms.
  const auto refused = [&](std::vector<std::string> args) {
    args.insert(args.end(), {"--listen", "tcp://127.0.0.1:*", "--join", address, "--join-timeout", "60s"});
    const auto start = std::chrono::steady_clock::now();
    CliResult r = run_hearsay(args);
    CHECK(std::chrono::steady_clock::now() - start < 20s);
    CHECK(r.status == 1);
    CHECK_THAT(r.err, Contains("could not join the run: 'seed' refused this peer: "));
    return r.err;
  };
  CHECK_THAT(refused({"peer", "--insecure", "--data", "synthetic", "--model", "lenet", "--threads", "1", "--id",
                      "other"}),
             Contains("the run uses --model mlp, this peer --model lenet: start it with --model mlp"));
  CHECK_THAT(refused(base({"--id", "stranger", "--run", "another"})),
             Contains("the run is 'hearsay' and this peer's --run is 'another': give it --run 'hearsay'"));
  CHECK_THAT(refused(base({"--id", "member"})),
             Contains("id 'member' is taken by " + member_address + ": give every peer its own --id"));
  CHECK_THAT(refused(base({"--id", "seed"})),
             Contains("id 'seed' is taken by " + address + ": give every peer its own --id"));
  // The seed says why in its own log too, and the member holding the id was not disturbed.
  CHECK_THAT(seed.err(), Contains("it trains model 'lenet-"));
  CHECK_THAT(seed.err(), Contains("refused the hello of 'member'"));
  CHECK_FALSE(contains(member.err(), "suspected"));
  CHECK(member.running());
  member.signal(SIGTERM);
  seed.signal(SIGTERM);
  CHECK(member.wait_for(10s) == 0);
  CHECK(seed.wait_for(10s) == 0);
}

TEST_CASE("peer: a CURVE join address without its key is refused before anything starts",
          "[peer][cli][process]") {
  TempPath dir;
  const CliResult keys = run_hearsay({"keygen", "--out", dir.file("k")});
  REQUIRE(keys.status == 0);
  const auto start = std::chrono::steady_clock::now();
  const CliResult r = run_hearsay({"peer", "--data", "synthetic", "--listen", "tcp://127.0.0.1:*", "--id", "j",
                                   "--keys", dir.file("k"), "--authorized", dir.file("k"), "--join",
                                   "tcp://127.0.0.1:9"});
  CHECK(std::chrono::steady_clock::now() - start < 10s);
  CHECK(r.status == 2);
  CHECK_THAT(r.err, Contains("--join 'tcp://127.0.0.1:9': the address has no CURVE key: append #KEY"));
}

namespace {

// The rest of the first line of `text` after `key`, or "".
std::string rest_of_line(const std::string& text, const std::string& key) {
  const auto at = text.find(key);
  if (at == std::string::npos) return "";
  const auto begin = at + key.size();
  return text.substr(begin, text.find('\n', begin) - begin);
}

}  // namespace

TEST_CASE("peer: the printed join line pastes into a shell, and --join-key reads the seed's key",
          "[peer][cli][process]") {
  // Z85 keys hold > < ( ) & $ ! #: printed bare, the line was a syntax error or a
  // redirection in bash.
  TempPath dir;
  std::filesystem::create_directories(dir.file("auth"));
  for (const char* name : {"a", "b"}) {
    const CliResult k = run_hearsay({"keygen", "--out", dir.file(name)});
    REQUIRE(k.status == 0);
    std::filesystem::copy_file(dir.path() / name / "peer.pub",
                               dir.path() / "auth" / (std::string(name) + ".pub"));
  }
  auto curve = [&](const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> args = {
        "peer",     "--keys",    dir.file(name),      "--authorized", dir.file("auth"),
        "--data",   "synthetic", "--model",           "mlp",          "--threads",
        "1",        "--listen",  "tcp://127.0.0.1:*", "--id",         name,
        "--epochs", "1000"};
    args.insert(args.end(), {"--ready-file", dir.file(name + std::string(".ready"))});
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  ChildProcess seed(curve("a", {}), dir.file("a.out"), dir.file("a.err"));
  std::string words;
  REQUIRE(eventually([&] { return !(words = rest_of_line(seed.err(), "others join with ")).empty(); }, 20s));
  INFO("printed: " << words);
  const std::string address = await_ready(seed, dir.file("a.ready"), "a").address;
  REQUIRE(!address.empty());
  // Through `bash -c` unchanged: exactly two words, --join and the address with its key.
  // (The line goes through a file, so that the test's own shell does not parse it.)
  const std::string script = dir.file("words.sh");
  {
    std::ofstream out(script);
    out << "printf '%s\\n' " << words;
  }
  const std::string command = "bash -c \"$(cat '" + script + "')\" > '" + dir.file("words.txt") + "'";
  REQUIRE(std::system(command.c_str()) == 0);
  CHECK(read_file(dir.file("words.txt")) == "--join\n" + address + "\n");
  REQUIRE(address.find('#') != std::string::npos);

  // A joiner given the address without its key, and the key's file.
  const std::string bare = address.substr(0, address.find('#'));
  ChildProcess joiner(curve("b", {"--join", bare, "--join-key", dir.file("a") + "/peer.pub"}),
                      dir.file("b.out"), dir.file("b.err"));
  CHECK(eventually([&] { return contains(joiner.err(), "joined the run: 2 live members"); }, 20s));
  CHECK_THAT(seed.err(), Contains("--join-key"));
  for (ChildProcess* p : {&joiner, &seed}) {
    p->signal(SIGTERM);
    CHECK(p->wait_for(10s) == 0);
  }

  // A key file that is not one, and a key that contradicts the address's, are refused.
  const CliResult no_file = run_hearsay(curve("b", {"--join", bare, "--join-key", dir.file("nope.pub")}));
  CHECK(no_file.status == 2);
  CHECK_THAT(no_file.err, Contains("--join-key") && Contains("nope.pub"));
  const CliResult other =
      run_hearsay(curve("b", {"--join", address, "--join-key", dir.file("b") + "/peer.pub"}));
  CHECK(other.status == 2);
  CHECK_THAT(other.err, Contains("carries a key other than"));
}

TEST_CASE("peer: resuming a checkpoint that finished its epochs reports its real accuracy",
          "[peer][cli][process]") {
  // It printed "final test accuracy -1.0000": no epoch ended in that process.
  TempPath dir;
  std::filesystem::create_directories(dir.path());
  const auto args = base(
      {"--listen", "tcp://127.0.0.1:*", "--id", "solo", "--epochs", "1", "--checkpoint", dir.file("ckpt")});
  const CliResult first = run_hearsay(args);
  INFO(first.all());
  REQUIRE(first.status == 0);
  auto with_resume = args;
  with_resume.push_back("--resume");
  const CliResult again = run_hearsay(with_resume);
  INFO(again.all());
  CHECK(again.status == 0);
  CHECK_THAT(again.out, Contains("nothing left to train"));
  CHECK_FALSE(contains(again.out, "-1.0000"));
  const auto accuracy = again.out.substr(again.out.find("final test accuracy ") + 20, 6);
  CHECK(std::stod(accuracy) > 0.5);  // synthetic classes are easy: one epoch is far above chance
}
