// Helpers shared by test_peer_process.cpp and test_peer_process_signals.cpp.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "child_process.hpp"
#include "gossip/network/membership/membership.hpp"
#include "gossip/network/transport/zmq_transport.hpp"
#include "model/checkpoint.hpp"
#include "model/data/dataset.hpp"
#include "model/trainer.hpp"
#include "model/zoo.hpp"
#include "test_support.hpp"

using namespace hearsay;
using namespace hearsay::testing;
using namespace std::chrono_literals;
using nlohmann::json;

namespace peer_process_test {

// The complete JSON lines of a metrics file (a line still being written is left out),
// of one record type.
inline std::vector<json> records(const std::string& path, const std::string& type) {
  std::vector<json> out;
  const std::string text = read_file(path);
  std::size_t begin = 0;
  for (std::size_t end; (end = text.find('\n', begin)) != std::string::npos; begin = end + 1) {
    json j = json::parse(text.substr(begin, end - begin), nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.value("type", "") == type) out.push_back(std::move(j));
  }
  return out;
}

// GET path from 127.0.0.1:port; the whole response, or "" when nothing answered.
inline std::string http_get(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string request = "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n";
    if (::send(fd, request.data(), request.size(), 0) == static_cast<ssize_t>(request.size())) {
      char buf[4096];
      for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
        response.append(buf, static_cast<std::size_t>(n));
    }
  }
  ::close(fd);
  return response;
}

// The value of a series in Prometheus text, or -1 when it is not there.
inline double series_value(const std::string& text, const std::string& series) {
  const auto at = text.find(series + "{");
  return at == std::string::npos ? -1.0 : std::stod(text.substr(text.find("} ", at) + 2));
}

// Flags every peer of these tests shares: a small model on synthetic data, fast failure
// detection, frequent metrics, the given round deadline. Enough epochs that peers train
// until they are stopped.
inline std::vector<std::string> common_peer_flags(const std::string& metrics_file,
                                                  const std::string& round_timeout) {
  return {"--insecure", "--data",          "synthetic", "--model",         "mlp",         "--batch",
          "32",         "--threads",       "1",         "--epochs",        "1000",        "--lr",
          "0.01",       "--lr-schedule",   "constant",  "--round-timeout", round_timeout, "--heartbeat",
          "100ms",      "--suspect-after", "400ms",     "--dead-after",    "1s",          "--log-every",
          "0.2",        "--metrics",       metrics_file};
}

// A gossip peer named id with its own --seed, listening on a port the system chooses.
inline std::vector<std::string> peer_args(const std::string& id, int seed, const TempPath& dir,
                                          std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"peer", "--listen", "tcp://127.0.0.1:*", "--id",
                                   id,     "--seed",   std::to_string(seed)};
  const auto common = common_peer_flags(dir.file(id + ".jsonl"), "500ms");
  args.insert(args.end(), common.begin(), common.end());
  args.insert(args.end(), {"--ready-file", dir.file(id + ".ready")});
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// The last value of key in a peer's metrics lines, or -1 before the first.
inline double last_metric(const std::string& metrics_file, const char* key) {
  const auto lines = records(metrics_file, "metrics");
  return lines.empty() ? -1.0 : lines.back()[key].get<double>();
}

inline std::unique_ptr<ChildProcess> start_peer(const std::vector<std::string>& args, const TempPath& dir,
                                                const std::string& id) {
  return std::make_unique<ChildProcess>(args, dir.file(id + ".out"), dir.file(id + ".err"));
}

// Mean over peers of ||x_i - mean(x)||: how far the models are from agreeing.
inline double consensus_distance(const std::vector<std::vector<float>>& xs) {
  const std::size_t n = xs.front().size();
  std::vector<double> mean(n, 0.0);
  for (const auto& x : xs)
    for (std::size_t k = 0; k < n; ++k) mean[k] += x[k] / static_cast<double>(xs.size());
  double total = 0;
  for (const auto& x : xs) {
    double d2 = 0;
    for (std::size_t k = 0; k < n; ++k) d2 += (x[k] - mean[k]) * (x[k] - mean[k]);
    total += std::sqrt(d2);
  }
  return total / static_cast<double>(xs.size());
}

inline std::vector<float> initial_params(int seed) {
  auto model = make_model("mlp");
  model->init(static_cast<std::uint64_t>(seed));
  return {model->params().begin(), model->params().end()};
}

inline std::vector<float> checkpoint_params(const std::string& dir) {
  auto model = make_model("mlp");
  read_checkpoint(checkpoint_path(dir), *model);
  return {model->params().begin(), model->params().end()};
}

// The longest time between two consecutive metrics lines of a peer that start in
// [from_s, to_s) (its own clock): a peer that stalls writes no line.
inline double longest_gap(const std::vector<json>& lines, double from_s, double to_s = 1e300) {
  double gap = 0;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const double t = lines[i - 1]["time_s"].get<double>();
    if (t >= from_s && t < to_s) gap = std::max(gap, lines[i]["time_s"].get<double>() - t);
  }
  return gap;
}

inline std::string logs(const std::vector<std::unique_ptr<ChildProcess>>& peers, const TempPath& dir) {
  std::string s;
  for (std::size_t i = 0; i < peers.size(); ++i)
    if (peers[i]) s += "--- peer " + std::to_string(i) + " stderr:\n" + peers[i]->err();
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    if (entry.path().extension() != ".jsonl") continue;
    const std::string text = read_file(entry.path());
    s += "--- last metrics of " + entry.path().filename().string() + ":\n" +
         text.substr(text.size() > 1500 ? text.size() - 1500 : 0);
  }
  return s;
}

// REQUIRE(eventually(...)) that shows the peers' logs and metrics when it fails (an INFO
// would capture them when declared, before anything happened).
template <class Check>
inline void require_eventually(Check check, std::chrono::steady_clock::duration timeout,
                               const std::vector<std::unique_ptr<ChildProcess>>& peers, const TempPath& dir) {
  if (!eventually(check, timeout)) FAIL("condition not met in time\n" << logs(peers, dir));
}

// Where peers[i] (named id, with --ready-file DIR/ID.ready) listens and serves, once it
// does; FAILs with the peers' logs when it exits first or does not listen within 20 s.
inline PeerReady ready_of(const std::vector<std::unique_ptr<ChildProcess>>& peers, std::size_t i,
                          const TempPath& dir, const std::string& id) {
  try {
    return await_ready(*peers[i], dir.file(id + ".ready"), id);
  } catch (const std::runtime_error& e) {
    FAIL(e.what() << "\n" << logs(peers, dir));
  }
  return {};
}

}  // namespace peer_process_test
