// What `hearsay watch` polls: peers named on the command line (a URL or HOST:PORT of a
// peer's --http) and Prometheus file_sd targets files, the JSON that scripts/launch writes:
//
//   [{"targets": ["10.0.0.11:9101"], "labels": {"run": "r", "rank": "0", "host": "lab-a"}}, ...]
//
// A file is read again when it changes (peers added); a file that turns unreadable or
// invalid keeps its last good list, with a warning to show.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "peer/http_client.hpp"

namespace hearsay {

struct WatchTarget {
  HttpUrl url;
  std::map<std::string, std::string> labels;  // a targets file's: run, rank, host, algorithm, ...
};

// The entries of a file_sd targets file (JSON), in order. std::invalid_argument starting
// with `name` and saying what is wrong and where (not JSON, not an array, an entry without
// "targets", a target that is no HOST:PORT, a label that is no string).
std::vector<WatchTarget> parse_targets_file(const std::string& text, const std::string& name);

class TargetList {
 public:
  // Each argument a URL (http://HOST:PORT, HOST:PORT, :PORT) or the path of a targets
  // file. std::invalid_argument naming the argument when it is neither, or a file cannot
  // be read or is not a valid targets file.
  explicit TargetList(const std::vector<std::string>& arguments);

  // Reads again every file whose modification time or size changed. Returns a warning
  // per file that cannot be read now (its last good list is kept), empty when all is well.
  std::vector<std::string> refresh();

  // Every target, files' in their order, each address once (the first one's labels).
  const std::vector<WatchTarget>& targets() const { return targets_; }
  bool has_files() const;

 private:
  struct Source {
    std::string argument;
    bool is_file = false;
    std::filesystem::file_time_type modified{};
    std::uintmax_t size = 0;
    std::vector<WatchTarget> targets;
  };
  // Reads a file source; false (and `problem` set) when it cannot be read or parsed.
  static bool read(Source& source, std::string& problem);
  void merge();

  std::vector<Source> sources_;
  std::vector<WatchTarget> targets_;
};

}  // namespace hearsay
