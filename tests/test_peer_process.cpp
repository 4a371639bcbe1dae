// `hearsay peer` as users run it: real processes on loopback, synthetic data. Several
// peers join through one seed and converge; one is killed with SIGKILL and the others
// keep training; it comes back with --resume; SIGTERM ends each cleanly; a late joiner
// starts from a neighbour's state.
#include "peer_process_test_util.hpp"

using namespace peer_process_test;

TEST_CASE("peer: four peers converge, survive a SIGKILL, and the killed one resumes", "[peer][process]") {
  TempPath dir;
  std::filesystem::create_directories(dir.path());
  const int n = 4;
  std::vector<std::string> ids;
  for (int i = 0; i < n; ++i) ids.push_back("p" + std::to_string(i));
  // Different seeds, and --initial-state own: the peers start from different models, so
  // agreeing is the mixing's work.
  auto args_of = [&](int i, const std::string& seed_address) {
    std::vector<std::string> extra = {
        "--initial-state", "own", "--checkpoint", dir.file("ckpt_" + ids[i]), "--checkpoint-every", "300ms"};
    if (!seed_address.empty()) extra.insert(extra.end(), {"--join", seed_address});
    return peer_args(ids[i], 1 + i, dir, extra);
  };
  std::vector<std::unique_ptr<ChildProcess>> peers(n);
  peers[0] = start_peer(args_of(0, ""), dir, ids[0]);
  const std::string seed = ready_of(peers, 0, dir, ids[0]).address;
  for (int i = 1; i < n; ++i) peers[i] = start_peer(args_of(i, seed), dir, ids[i]);

  auto metrics = [&](int i) { return records(dir.file(ids[i] + ".jsonl"), "metrics"); };
  auto last = [&](int i, const char* key) { return last_metric(dir.file(ids[i] + ".jsonl"), key); };
  // Everyone sees everyone, and the models agree 100 times better than at the start.
  const double d_start =
      consensus_distance({initial_params(1), initial_params(2), initial_params(3), initial_params(4)});
  require_eventually(
      [&] {
        for (int i = 0; i < n; ++i) {
          if (last(i, "live_members") != n) return false;
          const double d = last(i, "partner_distance");
          if (d <= 0 || d > d_start / 100) return false;
        }
        return true;
      },
      60s, peers, dir);

  // SIGKILL one: the others go on, without a stall longer than failure detection.
  const std::vector<double> killed_at = [&] {
    std::vector<double> t;
    for (int i = 0; i < n - 1; ++i) t.push_back(last(i, "time_s"));
    return t;
  }();
  peers[3]->signal(SIGKILL);
  REQUIRE(peers[3]->wait_for(10s) == -1);
  std::vector<double> steps_at_kill;
  for (int i = 0; i < n - 1; ++i) steps_at_kill.push_back(last(i, "step"));
  require_eventually(
      [&] {
        for (int i = 0; i < n - 1; ++i)
          if (last(i, "live_members") != n - 1 || last(i, "step") < steps_at_kill[i] + 100) return false;
        return true;
      },
      30s, peers, dir);
  for (int i = 0; i < n - 1; ++i) {
    INFO("peer " << i);
    // Failure detection: --dead-after 1s; a round with the dead partner is bounded by
    // --round-timeout 500ms. A metrics line comes every 0.2 s while steps are taken: 1.5 s
    // on an idle machine. Four training processes on a busy one take longer between lines
    // anyway; what this peer already showed before the kill (its longest gap over the 5 s
    // before, beyond the 0.2 s cadence) is added, since the kill is not what caused it.
    const double kill_s = killed_at[static_cast<std::size_t>(i)];
    const double slowness = std::max(0.0, longest_gap(metrics(i), kill_s - 5, kill_s) - 0.2);
    INFO("longest gap before the kill beyond the 0.2 s cadence: " << slowness << " s");
    CHECK(longest_gap(metrics(i), kill_s) < 1.5 + slowness);
  }

  // It comes back from its checkpoint, rejoins and catches up.
  const std::int64_t checkpoint_step = [&] {
    auto model = make_model("mlp");
    return read_checkpoint(checkpoint_path(dir.file("ckpt_p3")), *model).step;
  }();
  REQUIRE(checkpoint_step > 0);
  std::vector<std::string> resume_args = args_of(3, seed);
  resume_args.push_back("--resume");
  std::filesystem::remove(dir.file("p3.jsonl"));
  const PeerReady before = ready_of(peers, 3, dir, ids[3]);
  std::filesystem::remove(dir.file("p3.ready"));
  peers[3] = start_peer(resume_args, dir, ids[3]);
  // It says again where it listens: the new process, at a port of its own choosing.
  const PeerReady again = ready_of(peers, 3, dir, ids[3]);
  CHECK(again.pid == peers[3]->pid());
  CHECK(again.pid != before.pid);
  CHECK(again.id == "p3");
  require_eventually([&] { return !records(dir.file("p3.jsonl"), "start").empty(); }, 20s, peers, dir);
  const json start = records(dir.file("p3.jsonl"), "start").front();
  CHECK(start["resumed"] == true);
  // It was away while the others trained on, well over a tenth of an epoch: it goes on
  // from a live neighbour's newer state and step, not from its checkpoint's
  // (behind_the_run, docs/PROTOCOL.md 4.5).
  CHECK(start["start_step"].get<std::int64_t>() > checkpoint_step);
  require_eventually([&] { return contains(peers[3]->err(), "started from the training state of"); }, 20s,
                     peers, dir);
  // Every peer, not only the one back: a peer whose last interval (0.2 s) was far from its
  // partners, on a loaded machine, made the checkpoints below agree only 87 times better.
  require_eventually(
      [&] {
        for (int i = 0; i < n; ++i) {
          if (last(i, "live_members") != n) return false;
          const double d = last(i, "partner_distance");
          if (d <= 0 || d > d_start / 100) return false;
        }
        return last(3, "step") > checkpoint_step + 50;
      },
      60s, peers, dir);
  std::string distances;
  for (int i = 0; i < n; ++i) distances += " " + std::to_string(last(i, "partner_distance"));
  INFO("partner distances before the SIGTERM:" << distances);

  // SIGTERM: each finishes its step, saves, says bye and exits 0 within 5 s.
  for (auto& p : peers) p->signal(SIGTERM);
  for (int i = 0; i < n; ++i) {
    INFO("peer " << i);
    CHECK(peers[i]->wait_for(5s) == 0);
    const auto final_records = records(dir.file(ids[i] + ".jsonl"), "final");
    REQUIRE(final_records.size() == 1);
    CHECK(final_records[0]["interrupted"] == true);
  }
  std::vector<std::vector<float>> final_params;
  for (int i = 0; i < n; ++i) final_params.push_back(checkpoint_params(dir.file("ckpt_" + ids[i])));
  const double d_end = consensus_distance(final_params);
  INFO("consensus distance: start " << d_start << ", end " << d_end);
  std::string apart;  // which peer stands apart, if one does
  for (int i = 0; i < n; ++i) {
    std::vector<std::vector<float>> without = final_params;
    without.erase(without.begin() + i);
    apart += " " + ids[i] + " " + std::to_string(consensus_distance(without));
  }
  INFO("consensus distance without each peer:" << apart);
  CHECK(d_end < d_start / 100);

  // The final checkpoint reads back with an independent reader of the format.
  const std::string command =
      std::string("python3 '") + HEARSAY_SOURCE_DIR + "/tests/read_safetensors.py' '" +
      checkpoint_path(dir.file("ckpt_p0")).string() + "' > '" + dir.file("summary.json") + "'";
  REQUIRE(std::system(command.c_str()) == 0);
  const json summary = json::parse(read_file(dir.file("summary.json")));
  CHECK(summary["metadata"]["hearsay.model"] == "mlp");
  CHECK(summary["metadata"]["peer"] == "p0");
}

TEST_CASE("peer: a late joiner starts from a neighbour's parameters", "[peer][process]") {
  TempPath dir;
  std::filesystem::create_directories(dir.path());
  std::vector<std::unique_ptr<ChildProcess>> peers(3);
  peers[0] = start_peer(peer_args("a", 1, dir, {"--http", "127.0.0.1:0"}), dir, "a");
  const PeerReady seed_ready = ready_of(peers, 0, dir, "a");
  const std::string seed = seed_ready.address;
  peers[1] = start_peer(peer_args("b", 1, dir, {"--join", seed}), dir, "b");
  // Wait until the two have learnt something.
  auto recent_loss = [&](const std::string& id) {
    const auto lines = records(dir.file(id + ".jsonl"), "metrics");
    return lines.size() < 3 ? 1e9 : lines.back()["loss"].get<double>();
  };
  require_eventually([&] { return recent_loss("a") < 0.3 && recent_loss("b") < 0.3; }, 60s, peers, dir);

  // A fresh model of the joiner's seed has a loss near ln(10) on this data.
  auto fresh = make_model("mlp");
  fresh->init(77);
  TrainTest data = load_mnist_format("synthetic");
  Trainer trainer(*fresh, 1, 1000);
  const double fresh_loss =
      trainer.evaluate(data.train.images.data(), data.train.labels.data(), 1000).mean_loss();
  REQUIRE(fresh_loss > 1.5);

  peers[2] = start_peer(peer_args("c", 77, dir, {"--join", seed}), dir, "c");
  require_eventually([&] { return !records(dir.file("c.jsonl"), "metrics").empty(); }, 30s, peers, dir);
  const json start = records(dir.file("c.jsonl"), "start").front();
  CHECK(start["pulled_from"].is_string());
  CHECK(start["start_step"].get<std::int64_t>() > 0);
  const json first = records(dir.file("c.jsonl"), "metrics").front();
  CHECK(first["step"].get<std::int64_t>() == start["start_step"].get<std::int64_t>() + 1);
  const double theirs = std::max(recent_loss("a"), recent_loss("b"));
  const double mine = first["loss"].get<double>();
  INFO("joiner's first loss " << mine << ", neighbours' " << theirs << ", a fresh model's " << fresh_loss);
  CHECK(std::abs(mine - theirs) < std::abs(mine - fresh_loss));
  CHECK(mine < 0.5);

  // The first peer serves Prometheus text and a JSON status that list all three.
  REQUIRE(seed_ready.http_port);
  const int http_port = *seed_ready.http_port;
  REQUIRE(http_port > 0);
  require_eventually(
      [&] {
        return contains(http_get(http_port, "/metrics"),
                        "hearsay_live_members{peer=\"a\",algo=\"gossip\"} 3");
      },
      20s, peers, dir);
  const std::string metrics_text = http_get(http_port, "/metrics");
  CHECK_THAT(metrics_text, Catch::Matchers::Contains("# TYPE hearsay_exchanges_ok_total counter"));
  const std::string status = http_get(http_port, "/status");
  const auto body = status.find("\r\n\r\n");
  REQUIRE(body != std::string::npos);
  const json j = json::parse(status.substr(body + 4));
  CHECK(j["members"].size() == 3);
  CHECK(j["run"] == "hearsay");
  CHECK(j["state"] == "training");  // what hearsay watch shows

  for (auto& p : peers) p->signal(SIGTERM);
  for (auto& p : peers) CHECK(p->wait_for(5s) == 0);
}

TEST_CASE("peer: /metrics shows the counters as they are when scraped", "[peer][process]") {
  // It served the snapshot of the last log interval: scraped 3 s into a run it said
  // uptime 0.26 s and step 1. Here the log interval is a minute.
  TempPath dir;
  std::filesystem::create_directories(dir.path());
  std::vector<std::unique_ptr<ChildProcess>> peers;
  peers.push_back(start_peer({"peer",
                              "--listen",
                              "tcp://127.0.0.1:*",
                              "--id",
                              "solo",
                              "--insecure",
                              "--data",
                              "synthetic",
                              "--model",
                              "mlp",
                              "--threads",
                              "1",
                              "--epochs",
                              "1000",
                              "--log-every",
                              "60",
                              "--http",
                              "127.0.0.1:0",
                              "--metrics",
                              dir.file("solo.jsonl"),
                              "--ready-file",
                              dir.file("solo.ready")},
                             dir, "solo"));
  const int port = ready_of(peers, 0, dir, "solo").http_port.value_or(0);
  REQUIRE(port > 0);
  const auto value = series_value;
  double first_step = -1;
  require_eventually([&] { return (first_step = value(http_get(port, "/metrics"), "hearsay_step")) > 1; },
                     30s, peers, dir);
  require_eventually([&] { return value(http_get(port, "/metrics"), "hearsay_step") > first_step + 10; }, 30s,
                     peers, dir);
  const std::string text = http_get(port, "/metrics");
  CHECK(value(text, "hearsay_uptime_seconds") > 0);
  CHECK_THAT(text,
             Catch::Matchers::Contains(
                 "hearsay_dropped_messages_total{peer=\"solo\",algo=\"gossip\",reason=\"bad_checksum\"} 0"));
  // The metrics file has had one line only (the first step's): the scrapes did not come from it.
  CHECK(records(dir.file("solo.jsonl"), "metrics").size() == 1);
  peers[0]->signal(SIGTERM);
  CHECK(peers[0]->wait_for(10s) == 0);
}

TEST_CASE("peer: a D-PSGD rank killed and resumed rejoins its neighbours' rounds", "[peer][slow]") {
  // D-PSGD matches messages by round number. The resumed rank is hundreds of steps
  // behind its neighbours; unless it continues at their round, every message of either
  // side is for a round the other has left, and each round ends at its deadline.
  TempPath dir;
  std::filesystem::create_directories(dir.path());
  auto args_of = [&](int rank, const std::string& seed_address) {
    std::vector<std::string> args = {
        "peer",   "--listen", "tcp://127.0.0.1:*", "--rank", std::to_string(rank), "--world", "3",
        "--algo", "dpsgd",    "--graph",           "ring"};
    const auto common = common_peer_flags(dir.file("r" + std::to_string(rank) + ".jsonl"), "1s");
    args.insert(args.end(), common.begin(), common.end());
    args.insert(args.end(), {"--checkpoint", dir.file("c" + std::to_string(rank)), "--checkpoint-every",
                             "200ms", "--ready-file", dir.file("r" + std::to_string(rank) + ".ready")});
    if (!seed_address.empty()) args.insert(args.end(), {"--join", seed_address});
    return args;
  };
  std::vector<std::unique_ptr<ChildProcess>> peers(3);
  peers[0] = start_peer(args_of(0, ""), dir, "r0");
  const std::string seed = ready_of(peers, 0, dir, "r0").address;
  peers[1] = start_peer(args_of(1, seed), dir, "r1");
  peers[2] = start_peer(args_of(2, seed), dir, "r2");
  auto last = [&](int rank, const char* key) {
    return last_metric(dir.file("r" + std::to_string(rank) + ".jsonl"), key);
  };
  require_eventually(
      [&] { return last(2, "step") > 100 && std::filesystem::exists(checkpoint_path(dir.file("c2"))); }, 30s,
      peers, dir);
  peers[2]->signal(SIGKILL);
  REQUIRE(peers[2]->wait_for(10s) == -1);
  // The other two go on without it, well past its checkpoint.
  const double step_at_kill = last(0, "step");
  require_eventually([&] { return last(0, "step") > step_at_kill + 100; }, 60s, peers, dir);

  std::vector<std::string> resume = args_of(2, seed);
  resume.push_back("--resume");
  std::filesystem::remove(dir.file("r2.jsonl"));
  peers[2] = start_peer(resume, dir, "r2");
  require_eventually([&] { return last(2, "step") > 0 && contains(peers[2]->err(), "rounds continue at"); },
                     30s, peers, dir);
  // Rank 0 left rank 2 out for 20 rounds after its connection broke (PeerHealth) and
  // then tries it again; from then on it hears from both ring neighbours every round.
  const double restart_step = last(0, "step");
  require_eventually([&] { return last(0, "step") > restart_step + 40; }, 60s, peers, dir);
  const double step0 = last(0, "step"), ok0 = last(0, "exchanges_ok"), late0 = last(0, "exchanges_timed_out");
  require_eventually([&] { return last(0, "step") > step0 + 100; }, 60s, peers, dir);
  const double steps = last(0, "step") - step0;
  const double exchanged = last(0, "exchanges_ok") - ok0;
  const double timed_out = last(0, "exchanges_timed_out") - late0;
  INFO("rank 0 after the restart: " << steps << " steps, " << exchanged << " exchanges, " << timed_out
                                    << " timed out");
  CHECK(exchanged >= 1.8 * steps);  // two in-neighbours per round on a ring of 3
  CHECK(timed_out <= 3);            // the rounds the resumed rank needs to catch up

  for (auto& p : peers) p->signal(SIGTERM);
  for (auto& p : peers) CHECK(p->wait_for(5s) == 0);
}

TEST_CASE("peer: a healthy run counts busy partners apart from refusals, and logs no refusal warning",
          "[peer][process]") {
  // On loopback with three healthy peers, /metrics said exchanges_refused 930 against
  // exchanges_ok 5417: partners answering "busy" (gossip's exchanges never overlap) were
  // counted as refusals, which LAB.md tells users to read as a bad link or a firewall.
  TempPath dir;
  std::filesystem::create_directories(dir.path());
  std::vector<std::unique_ptr<ChildProcess>> peers;
  const std::vector<std::string> ids = {"a", "b", "c"};
  const std::vector<std::string> short_run = {"--time-budget", "6s", "--min-peers", "3"};
  peers.push_back(start_peer(peer_args("a", 1, dir, short_run), dir, "a"));
  const std::string seed = ready_of(peers, 0, dir, "a").address;
  for (std::size_t i = 1; i < ids.size(); ++i) {
    auto args = peer_args(ids[i], static_cast<int>(i) + 1, dir, short_run);
    args.insert(args.end(), {"--join", seed});
    peers.push_back(start_peer(args, dir, ids[i]));
  }
  for (auto& p : peers) REQUIRE(p->wait_for(120s) == 0);
  double ok = 0, busy = 0, refused = 0;
  for (const auto& id : ids) {
    ok += last_metric(dir.file(id + ".jsonl"), "exchanges_ok");
    busy += last_metric(dir.file(id + ".jsonl"), "exchanges_busy");
    refused += last_metric(dir.file(id + ".jsonl"), "exchanges_refused");
    CHECK_FALSE(contains(read_file(dir.file(id + ".err")), "warn  gossip: refused"));
  }
  INFO(logs(peers, dir));
  CHECK(ok > 100);
  CHECK(busy > 0);  // three peers asking each other at every step: some find a partner busy
  CHECK(refused <= 0.01 * ok);
}
