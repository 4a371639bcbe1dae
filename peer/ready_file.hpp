// The ready file of `hearsay peer --ready-file PATH`: once the peer is bound (its
// transport listens, membership and the state responder run) it writes, atomically, one
// JSON object saying where it is, for whoever started it (`hearsay sim`, the tests, the
// benchmarks) to read instead of its log:
//
//   {"id": "rank3", "rank": 3, "run": "sim-gossip-0-4242",
//    "address": "tcp://127.0.0.1:40117", "pid": 4243, "http_port": null}
//
// `address` is the one to --join (with #KEY under CURVE); `rank` is null without --rank,
// `http_port` the port of /metrics and /status, null without --http. A restarted peer
// writes the file again. A reader that starts a peer removes an old file first and polls
// for the new one (await_ready_file).
#pragma once
#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "peer/peer_config.hpp"

namespace hearsay {

struct PeerReady {
  std::string id;
  std::optional<int> rank;
  std::string run;
  std::string address;  // where others reach the peer: what --join takes
  long pid = 0;
  std::optional<int> http_port;  // /metrics and /status; none without --http
};

std::string to_json(const PeerReady& ready);
// std::invalid_argument saying which field is missing or of the wrong type.
PeerReady parse_peer_ready(std::string_view text);

// Writes cfg.output.ready_file (atomically) when it is given; nothing otherwise. What
// PeerProcess calls once it listens. std::runtime_error naming the file when it cannot.
void write_ready_file(const PeerConfig& cfg, const std::string& id, const std::string& address,
                      std::optional<int> http_port);

// The ready file at `path`, or nullopt while there is none. std::runtime_error naming the
// file when it is there but unreadable or not a ready record.
std::optional<PeerReady> read_ready_file(const std::filesystem::path& path);

// What a wait for a peer's ready file knows of that peer.
struct ReadyWait {
  std::string who;            // the peer, as errors name it ("rank3")
  std::filesystem::path log;  // its log, named in errors
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  // How the process ended ("exit 2", "killed by SIGKILL"), nullopt while it runs.
  std::function<std::optional<std::string>()> ended;
  // Why it ended, from its log (the line that says so); empty: the error names the log.
  std::function<std::string()> reason;
};

// Polls `path` every 20 ms until the peer wrote it, and returns what it says.
// std::runtime_error when the peer ends first ("rank3 exit 2 before it listened: REASON",
// REASON being "see LOG" when `reason` has none) or writes nothing within the timeout
// ("rank3 did not listen within 60 s (see LOG)").
PeerReady await_ready_file(const std::filesystem::path& path, const ReadyWait& wait);

}  // namespace hearsay
