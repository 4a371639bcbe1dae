// `hearsay peer` as users run it, continued: two SIGINTs at once, a member pushing
// finite garbage, a gossip joiner that trains at once, a crash on any of its threads.
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <map>

#include "peer_process_test_util.hpp"
#include "sim/peer_record.hpp"

using namespace peer_process_test;
using Catch::Contains;
using Catch::EndsWith;
using Catch::StartsWith;

TEST_CASE("peer: two SIGINTs at once are one request to stop: a bye, a checkpoint, exit 0",
          "[peer][process]") {
  // A terminal's Ctrl-C reaches the process and its group, and `timeout` forwards what it
  // gets: the pair used to read as "a second Ctrl-C" and killed the peer at once (exit
  // 130, no checkpoint), 3 times of 3.
  for (int attempt = 0; attempt < 10; ++attempt) {
    INFO("attempt " << attempt);
    TempPath dir;
    std::filesystem::create_directories(dir.path());
    const std::string id = "solo";
    std::vector<std::unique_ptr<ChildProcess>> peers;
    peers.push_back(start_peer(peer_args(id, 1, dir, {"--checkpoint", dir.file("ckpt")}), dir, id));
    const auto& peer = peers.front();
    require_eventually([&] { return last_metric(dir.file(id + ".jsonl"), "step") > 0; }, 30s, peers, dir);
    // A fraction of a millisecond apart, as a shell sends two: sent back to back, the kernel
    // merges them; a few ms apart, the peer is gone before the second.
    ::kill(peer->pid(), SIGINT);
    std::this_thread::sleep_for(300us);
    ::kill(peer->pid(), SIGINT);
    CHECK(peer->wait_for(10s) == 0);
    const auto final_records = records(dir.file(id + ".jsonl"), "final");
    REQUIRE(final_records.size() == 1);
    CHECK(final_records[0]["interrupted"] == true);
    CHECK(std::filesystem::exists(checkpoint_path(dir.file("ckpt"))));
  }
}

TEST_CASE("peer: a member's push of finite garbage is refused, counted, and the peer trains on",
          "[peer][process]") {
  // A well-formed params_push with every value 1e30 passes the transport's checks: averaged
  // in, it ended the peer ("the loss became -nan"). Here a member of the run (joined like
  // any peer, through membership) sends such pushes to a training peer.
  TempPath dir;
  std::filesystem::create_directories(dir.path());
  std::vector<std::unique_ptr<ChildProcess>> peers;
  peers.push_back(start_peer(peer_args("victim", 1, dir, {"--http", "127.0.0.1:0"}), dir, "victim"));
  const PeerReady victim = ready_of(peers, 0, dir, "victim");
  const std::string address = victim.address;
  REQUIRE(victim.http_port);
  const int port = *victim.http_port;

  auto model = make_model("mlp");
  transport::ZmqOptions o;
  o.id = "intruder";
  o.expect = {"hearsay", model->fingerprint()};
  o.security.insecure = true;
  transport::ZmqTransport intruder(o);
  membership::MembershipOptions m;
  m.seeds = {address};
  m.heartbeat = 100ms;
  m.suspect_after = 400ms;
  m.dead_after = 1s;
  membership::Membership member(intruder, m);
  member.start();
  // Membership connects to the members it learns of, the victim among them.
  require_eventually([&] { return member.state_of("victim") == membership::MemberState::alive; }, 20s, peers,
                     dir);
  // The victim sends the new member its own requests: read and dropped (the transport
  // stops taking messages in while its receive queue is full).
  std::atomic<bool> done{false};
  std::jthread reader([&] {
    while (!done) (void)intruder.receive(std::chrono::steady_clock::now() + 50ms);
  });
  struct StopReading {
    std::atomic<bool>& done;
    ~StopReading() { done = true; }  // before reader joins, also when a REQUIRE throws
  } stop_reading{done};

  const auto implausible = [&] {
    return series_value(http_get(port, "/metrics"), "hearsay_exchanges_implausible_total");
  };
  const std::vector<float> garbage(static_cast<std::size_t>(model->param_count()), 1e30f);
  std::uint64_t nonce = 1;
  // Until the victim has taken the intruder into its exchange (at a step boundary after the
  // member list changed), pushes are refused as from outside the run: send until one counts.
  // One push every 200 ms: each is 0.4 MB, and the transport holds at most 64 for a peer.
  auto next_push = std::chrono::steady_clock::now();
  require_eventually(
      [&] {
        if (std::chrono::steady_clock::now() >= next_push) {
          next_push = std::chrono::steady_clock::now() + 200ms;
          wire::Header push;
          push.type = wire::MessageType::params_push;
          push.nonce = nonce++;
          push.weight = 0.5;
          intruder.send("victim", push, transport::Payload::copy_f32(garbage));
        }
        return implausible() >= 1;
      },
      30s, peers, dir);
  // It trains on, with finite parameters and losses.
  const double step = last_metric(dir.file("victim.jsonl"), "step");
  require_eventually([&] { return last_metric(dir.file("victim.jsonl"), "step") > step + 20; }, 30s, peers,
                     dir);
  CHECK(std::isfinite(last_metric(dir.file("victim.jsonl"), "loss")));
  done = true;
  reader.join();
  member.stop();
  peers[0]->signal(SIGTERM);
  CHECK(peers[0]->wait_for(10s) == 0);
  CHECK_THAT(peers[0]->err(),
             Catch::Matchers::Contains("refused a request with values whose norm is over 100"));
}

TEST_CASE("peer: a gossip joiner trains at once, while the news of it spreads", "[peer][process]") {
  // It waited for its member view to be quiet for two heartbeats before its first round:
  // with 3 s heartbeats, 6 s or more before its first step.
  TempPath dir;
  std::filesystem::create_directories(dir.path());
  const auto args = [&](const std::string& id, std::vector<std::string> extra) {
    std::vector<std::string> a = {"peer",
                                  "--listen",
                                  "tcp://127.0.0.1:*",
                                  "--id",
                                  id,
                                  "--insecure",
                                  "--data",
                                  "synthetic",
                                  "--model",
                                  "mlp",
                                  "--threads",
                                  "1",
                                  "--epochs",
                                  "1000",
                                  "--heartbeat",
                                  "3s",
                                  "--suspect-after",
                                  "10s",
                                  "--dead-after",
                                  "30s",
                                  "--metrics",
                                  dir.file(id + ".jsonl"),
                                  "--ready-file",
                                  dir.file(id + ".ready")};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  std::vector<std::unique_ptr<ChildProcess>> peers;
  peers.push_back(start_peer(args("seed", {}), dir, "seed"));
  const std::string seed = ready_of(peers, 0, dir, "seed").address;
  peers.push_back(start_peer(args("joiner", {"--join", seed}), dir, "joiner"));
  require_eventually([&] { return !records(dir.file("joiner.jsonl"), "metrics").empty(); }, 30s, peers, dir);
  // Its own clock: loading the synthetic set and joining take well under a second here.
  const double first_step_s = records(dir.file("joiner.jsonl"), "metrics").front()["time_s"].get<double>();
  CHECK(first_step_s < 4.0);
  for (auto& p : peers) p->signal(SIGTERM);
  for (auto& p : peers) CHECK(p->wait_for(10s) == 0);
  // The seed, alone at first, took the joiner into its peer set when the news came.
  CHECK_THAT(peers[0]->err(), Catch::Matchers::Contains("mixing with 1 other peer(s) now"));
}

namespace {

// A peer alone ("solo") that has taken a training step, to be crashed: no core file from it
// in the build directory (the parent's limit is the child's).
struct CrashTarget {
  TempPath dir;
  std::vector<std::unique_ptr<ChildProcess>> peers;
  ChildProcess& peer() { return *peers.front(); }
};

std::unique_ptr<CrashTarget> start_crash_target() {
  const struct rlimit no_core = {0, 0};
  REQUIRE(::setrlimit(RLIMIT_CORE, &no_core) == 0);
  auto target = std::make_unique<CrashTarget>();
  std::filesystem::create_directories(target->dir.path());
  target->peers.push_back(start_peer(peer_args("solo", 1, target->dir, {}), target->dir, "solo"));
  require_eventually([&] { return last_metric(target->dir.file("solo.jsonl"), "step") > 0; }, 30s,
                     target->peers, target->dir);
  return target;
}

}  // namespace

TEST_CASE("peer: a crash leaves the signal and the stack in the peer's log and dies of that signal",
          "[peer][process]") {
  for (const int sig : {SIGSEGV, SIGBUS, SIGABRT}) {
    INFO("signal " << sig);
    const auto target = start_crash_target();
    const TempPath& dir = target->dir;
    ChildProcess* peer = &target->peer();
    peer->signal(sig);  // as a fault would raise it, minus the fault's address
    REQUIRE(peer->wait_for(10s) == -1);
    CHECK(peer->killed_by() == sig);  // the default action still follows: exit status, core
    const std::string log = peer->err();
    INFO(log);
    CHECK_THAT(log, Contains(std::string("hearsay: crashed: SIG") + sigabbrev_np(sig) + " (") &&
                        Contains(" sent by pid " + std::to_string(::getpid())) && Contains(" on thread '"));
    // The stack follows, a frame a line, the first ones in the binary (the handler's own).
    const auto stack = log.substr(log.find("its stack:\n") + 11);
    CHECK_THAT(stack, StartsWith(HEARSAY_BINARY "(+0x"));
    CHECK(std::count(stack.begin(), stack.end(), '\n') >= 3);
    // Then the command that names the frames in hearsay: run, it names the handler and
    // the peer's own functions.
    const auto at = log.find("to name them: ");
    REQUIRE(at != std::string::npos);
    const std::string addr2line = log.substr(at + 14, log.find('\n', at) - at - 14);
    CHECK_THAT(addr2line, StartsWith("addr2line -Cfpe /") && Contains(" 0x"));
    const std::string named = dir.file("named.txt");
    REQUIRE(std::system((addr2line + " > '" + named + "'").c_str()) == 0);
    CHECK_THAT(read_file(named), Contains("on_fatal_signal") && Contains("hearsay::run_peer"));
    // And the simulator's reading of the log gives the crash as why the peer ended.
    const auto log_path = dir.path() / "solo.log";
    { std::ofstream(log_path) << log; }
    CHECK_THAT(hearsay::sim::last_error_line(log_path),
               StartsWith(std::string("crashed: SIG") + sigabbrev_np(sig)) &&
                   EndsWith("; its stack is in " + log_path.string()));
    // The report whole, which the simulator prints with the run's end.
    const std::string report = hearsay::sim::crash_report_in(log_path);
    CHECK_THAT(report, StartsWith("hearsay: crashed: SIG") && EndsWith(addr2line + "\n"));
    CHECK(std::count(report.begin(), report.end(), '\n') >= 5);
  }
}

namespace {

// The threads of process `pid`: their ids by name ("hs-transport", "ZMQbg/IO/0", ...).
std::multimap<std::string, pid_t> threads_of(pid_t pid) {
  std::multimap<std::string, pid_t> threads;
  for (const auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
    std::string name = read_file(task.path() / "comm");
    if (!name.empty() && name.back() == '\n') name.pop_back();
    threads.emplace(name, static_cast<pid_t>(std::stol(task.path().filename().string())));
  }
  return threads;
}

// The signals thread `tid` of `pid` blocks, from the SigBlk line of its status.
std::uint64_t blocked_signals(pid_t pid, pid_t tid) {
  const std::string status =
      read_file("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/status");
  const auto at = status.find("SigBlk:");
  return at == std::string::npos ? ~std::uint64_t{0} : std::stoull(status.substr(at + 7), nullptr, 16);
}

}  // namespace

TEST_CASE("peer: every thread, libzmq's included, takes a fault's signal and reports it", "[peer][process]") {
  // A thread that blocks SIGSEGV and faults is killed before any handler runs, without a
  // word in the log: libzmq's I/O threads and the transport's poll thread block signals.
  for (const std::string victim : {"ZMQbg/IO/0", "hs-transport"}) {
    INFO(victim);
    const auto target = start_crash_target();
    ChildProcess* peer = &target->peer();
    const auto threads = threads_of(peer->pid());
    for (const auto& [name, tid] : threads) {
      INFO(name);
      const std::uint64_t blocked = blocked_signals(peer->pid(), tid);
      for (const int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) CHECK((blocked >> (sig - 1) & 1) == 0);
    }
    if (victim == "hs-transport") {  // it does keep a Ctrl-C off its polls
      REQUIRE(threads.count(victim) == 1);
      CHECK((blocked_signals(peer->pid(), threads.find(victim)->second) >> (SIGINT - 1) & 1) == 1);
    }
    // The signal, sent to that one thread as its fault would be: the report names it.
    REQUIRE(threads.count(victim) == 1);
    REQUIRE(::syscall(SYS_tgkill, peer->pid(), threads.find(victim)->second, SIGSEGV) == 0);
    REQUIRE(peer->wait_for(10s) == -1);
    CHECK(peer->killed_by() == SIGSEGV);
    CHECK_THAT(peer->err(),
               Contains("hearsay: crashed: SIGSEGV (invalid memory access) sent by pid " +
                        std::to_string(::getpid()) + " on thread '" + victim + "'; its stack:\n"));
  }
}
