#include "peer/ready_file.hpp"

#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "base/atomic_file.hpp"

namespace hearsay {

namespace {

using json = nlohmann::json;

// An int or null; std::invalid_argument for anything else.
std::optional<int> optional_int(const json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  if (!j[key].is_number_integer())
    throw std::invalid_argument(std::string("'") + key + "' is not an integer");
  return j[key].get<int>();
}

std::string required_string(const json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_string())
    throw std::invalid_argument(std::string("'") + key + "' is missing or not a string");
  return j[key].get<std::string>();
}

std::string seconds_text(std::chrono::milliseconds d) {
  if (d.count() % 1000 == 0) return std::to_string(d.count() / 1000);
  std::ostringstream s;
  s << static_cast<double>(d.count()) / 1000;
  return s.str();
}

}  // namespace

std::string to_json(const PeerReady& ready) {
  const auto or_null = [](const std::optional<int>& v) { return v ? json(*v) : json(nullptr); };
  return json{{"id", ready.id},   {"rank", or_null(ready.rank)},
              {"run", ready.run}, {"address", ready.address},
              {"pid", ready.pid}, {"http_port", or_null(ready.http_port)}}
      .dump();
}

PeerReady parse_peer_ready(std::string_view text) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw std::invalid_argument("not a JSON object");
  PeerReady r;
  r.id = required_string(j, "id");
  r.address = required_string(j, "address");
  r.run = j.contains("run") && j["run"].is_string() ? j["run"].get<std::string>() : "";
  if (!j.contains("pid") || !j["pid"].is_number_integer())
    throw std::invalid_argument("'pid' is missing or not an integer");
  r.pid = j["pid"].get<long>();
  r.rank = optional_int(j, "rank");
  r.http_port = optional_int(j, "http_port");
  return r;
}

void write_ready_file(const PeerConfig& cfg, const std::string& id, const std::string& address,
                      std::optional<int> http_port) {
  const std::string& path = cfg.output.ready_file;
  if (path.empty()) return;
  PeerReady r;
  r.id = id;
  if (cfg.network.rank >= 0) r.rank = cfg.network.rank;
  r.run = cfg.network.run;
  r.address = address;
  r.pid = static_cast<long>(::getpid());
  r.http_port = http_port;
  try {
    write_file_atomically(path, to_json(r) + "\n");
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot write the --ready-file " + path + ": " + e.what());
  }
}

std::optional<PeerReady> read_ready_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return std::nullopt;
    in.open(path);  // it appeared since the first try
    if (!in) throw std::runtime_error("cannot read the ready file " + path.string());
  }
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return parse_peer_ready(text.str());
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error("the ready file " + path.string() +
                             " is not a peer's ready record: " + e.what());
  }
}

PeerReady await_ready_file(const std::filesystem::path& path, const ReadyWait& wait) {
  const auto give_up = std::chrono::steady_clock::now() + wait.timeout;
  for (;;) {
    if (auto ready = read_ready_file(path)) return *std::move(ready);
    if (const auto ended = wait.ended ? wait.ended() : std::nullopt) {
      // It may have written the file just before it ended.
      if (auto ready = read_ready_file(path)) return *std::move(ready);
      const std::string why = wait.reason ? wait.reason() : std::string();
      throw std::runtime_error(wait.who + " " + *ended +
                               " before it listened: " + (why.empty() ? "see " + wait.log.string() : why));
    }
    if (std::chrono::steady_clock::now() > give_up)
      throw std::runtime_error(wait.who + " did not listen within " + seconds_text(wait.timeout) +
                               " s (see " + wait.log.string() + ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the file is all there is to watch
  }
}

}  // namespace hearsay
