#include "peer/watch_targets.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>
#include <system_error>

namespace hearsay {

namespace {

constexpr std::uintmax_t kMaxTargetsFile = 64 * 1024 * 1024;

const char* const kFileSdForm =
    "expected a Prometheus file_sd targets file: [{\"targets\": [\"HOST:PORT\"], \"labels\": {\"rank\": "
    "\"0\"}}, ...]";

std::string json_kind(const nlohmann::json& j) { return j.type_name(); }

WatchTarget target_of(const nlohmann::json& text, const std::string& where) {
  if (!text.is_string())
    throw std::invalid_argument(where + " is a " + json_kind(text) + ", not \"HOST:PORT\"");
  try {
    return WatchTarget{parse_http_url(text.get<std::string>()), {}};
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(where + ": " + e.what());
  }
}

std::map<std::string, std::string> labels_of(const nlohmann::json& entry, const std::string& where) {
  std::map<std::string, std::string> labels;
  const auto it = entry.find("labels");
  if (it == entry.end() || it->is_null()) return labels;
  if (!it->is_object())
    throw std::invalid_argument(where + ": \"labels\" is a " + json_kind(*it) + ", not an object");
  for (const auto& [key, value] : it->items()) {
    if (!value.is_string())
      throw std::invalid_argument(where + ": label \"" + key + "\" is a " + json_kind(value) +
                                  ", not a string");
    labels[key] = value.get<std::string>();
  }
  return labels;
}

bool looks_like_address(const std::string& argument) {
  return argument.find("://") != std::string::npos || argument.find(':') != std::string::npos;
}

}  // namespace

std::vector<WatchTarget> parse_targets_file(const std::string& text, const std::string& name) {
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    const bool yaml = name.ends_with(".yml") || name.ends_with(".yaml");
    throw std::invalid_argument(name + ": not JSON" +
                                (yaml ? " (YAML targets files are not read: write JSON)" : "") + "; " +
                                kFileSdForm);
  }
  if (!doc.is_array()) throw std::invalid_argument(name + ": a JSON " + json_kind(doc) + "; " + kFileSdForm);
  std::vector<WatchTarget> out;
  for (std::size_t i = 0; i < doc.size(); ++i) {
    const std::string where = name + ": entry " + std::to_string(i + 1);
    const nlohmann::json& entry = doc[i];
    if (!entry.is_object())
      throw std::invalid_argument(where + " is a " + json_kind(entry) + ", not an object");
    const auto targets = entry.find("targets");
    if (targets == entry.end()) throw std::invalid_argument(where + " has no \"targets\"; " + kFileSdForm);
    if (!targets->is_array())
      throw std::invalid_argument(where + ": \"targets\" is a " + json_kind(*targets) + ", not a list");
    const auto labels = labels_of(entry, where);
    for (std::size_t t = 0; t < targets->size(); ++t) {
      WatchTarget target = target_of((*targets)[t], where + ", target " + std::to_string(t + 1));
      target.labels = labels;
      out.push_back(std::move(target));
    }
  }
  return out;
}

TargetList::TargetList(const std::vector<std::string>& arguments) {
  for (const std::string& argument : arguments) {
    Source source;
    source.argument = argument;
    std::error_code ec;
    source.is_file = std::filesystem::is_regular_file(argument, ec);
    if (!source.is_file && !looks_like_address(argument)) {
      const bool exists = std::filesystem::exists(argument, ec);
      throw std::invalid_argument(
          "'" + argument + "': " + (exists ? "not a regular file" : "no such file") +
          ", and not a peer's address either (give http://HOST:PORT, HOST:PORT, or a targets file)");
    }
    if (source.is_file) {
      std::string problem;
      if (!read(source, problem)) throw std::invalid_argument(problem);
    } else {
      source.targets.push_back(WatchTarget{parse_http_url(argument), {}});
    }
    sources_.push_back(std::move(source));
  }
  merge();
}

bool TargetList::read(Source& source, std::string& problem) {
  std::error_code ec;
  const auto modified = std::filesystem::last_write_time(source.argument, ec);
  const auto size = ec ? 0 : std::filesystem::file_size(source.argument, ec);
  if (ec) {
    problem = source.argument + ": cannot read it: " + ec.message();
    return false;
  }
  if (size > kMaxTargetsFile) {
    problem = source.argument + ": " + std::to_string(size) + " bytes is too large for a targets file";
    return false;
  }
  std::ifstream in(source.argument, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) {
    problem = source.argument + ": cannot read it";
    return false;
  }
  try {
    source.targets = parse_targets_file(text.str(), source.argument);
  } catch (const std::invalid_argument& e) {
    problem = e.what();
    return false;
  }
  source.modified = modified;
  source.size = size;
  return true;
}

std::vector<std::string> TargetList::refresh() {
  std::vector<std::string> warnings;
  bool changed = false;
  for (Source& source : sources_) {
    if (!source.is_file) continue;
    std::error_code ec;
    const auto modified = std::filesystem::last_write_time(source.argument, ec);
    const auto size = ec ? 0 : std::filesystem::file_size(source.argument, ec);
    if (!ec && modified == source.modified && size == source.size) continue;
    std::string problem;
    if (read(source, problem)) {
      changed = true;
      continue;
    }
    warnings.push_back(problem + " (still watching its last " + std::to_string(source.targets.size()) +
                       " target(s))");
  }
  if (changed) merge();
  return warnings;
}

bool TargetList::has_files() const {
  for (const Source& source : sources_)
    if (source.is_file) return true;
  return false;
}

void TargetList::merge() {
  targets_.clear();
  std::set<std::string> seen;
  for (const Source& source : sources_)
    for (const WatchTarget& target : source.targets)
      if (seen.insert(target.url.text()).second) targets_.push_back(target);
}

}  // namespace hearsay
