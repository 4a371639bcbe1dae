#include "gossip/network/emulation/control_file.hpp"

#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "base/thread_name.hpp"

namespace hearsay::emulation {

PeerControl parse_peer_control(std::string_view text) {
  PeerControl control;
  bool has_blocked = false;
  int number = 0;
  std::istringstream in{std::string(text)};
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (const auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    std::istringstream words(line);
    std::string key;
    if (!(words >> key)) continue;
    const std::string where = "line " + std::to_string(number) + ": ";
    if (key == "blocked") {
      if (has_blocked) throw std::invalid_argument(where + "a second 'blocked' line; give one");
      has_blocked = true;
      for (std::string id; words >> id;) control.blocked.push_back(id);
    } else if (key == "slowdown") {
      if (control.slowdown) throw std::invalid_argument(where + "a second 'slowdown' line; give one");
      std::string value, extra;
      words >> value;
      double f = 0;
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), f);
      if (value.empty() || ec != std::errc() || end != value.data() + value.size() || !std::isfinite(f) ||
          f < 1 || f > 1000 || (words >> extra))
        throw std::invalid_argument(where + "'slowdown' takes one number F in [1, 1000], e.g. slowdown 3");
      control.slowdown = f;
    } else if (key == "stop") {
      std::string extra;
      if (words >> extra) throw std::invalid_argument(where + "'stop' takes nothing after it");
      control.stop = true;
    } else if (key == "hold") {
      std::string extra;
      if (words >> extra) throw std::invalid_argument(where + "'hold' takes nothing after it");
      control.hold = true;
    } else if (key == "pause-at") {
      if (control.pause_at) throw std::invalid_argument(where + "a second 'pause-at' line; give one");
      std::string value, extra;
      words >> value;
      std::int64_t step = -1;
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), step);
      if (value.empty() || ec != std::errc() || end != value.data() + value.size() || step < 1 ||
          (words >> extra))
        throw std::invalid_argument(where +
                                    "'pause-at' takes one step number, at least 1, e.g. pause-at 120");
      control.pause_at = step;
    } else if (key == "link") {
      if (control.link) throw std::invalid_argument(where + "a second 'link' line; give one");
      std::string value, extra;
      words >> value;
      if (value.empty() || (words >> extra))
        throw std::invalid_argument(where + "'link' takes one link, e.g. link 1mbit,20ms,loss=0.05");
      try {
        control.link = parse_link_spec(value);
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(where + e.what());
      }
    } else {
      throw std::invalid_argument(where + "unknown setting '" + key +
                                  "'; expected blocked, slowdown, link, hold, pause-at or stop");
    }
  }
  return control;
}

std::string to_text(const PeerControl& control) {
  std::string text = "blocked";
  for (const auto& id : control.blocked) text += " " + id;
  text += "\n";
  if (control.slowdown) {
    std::ostringstream f;
    f << *control.slowdown;
    text += "slowdown " + f.str() + "\n";
  }
  if (control.link) text += "link " + to_string(*control.link) + "\n";
  if (control.hold) text += "hold\n";
  if (control.stop) text += "stop\n";
  if (control.pause_at) text += "pause-at " + std::to_string(*control.pause_at) + "\n";
  return text;
}

ControlFileWatcher::ControlFileWatcher(std::filesystem::path path,
                                       std::function<void(const PeerControl&)> on_change,
                                       std::function<void(const std::string&)> on_error,
                                       std::chrono::milliseconds interval)
    : path_(std::move(path)),
      on_change_(std::move(on_change)),
      on_error_(std::move(on_error)),
      interval_(interval) {
  check();  // the settings as of the start, before the first step
  thread_ = std::thread([this] {
    name_this_thread("hs-control");
    run();
  });
}

ControlFileWatcher::~ControlFileWatcher() {
  {
    std::lock_guard lock(mutex_);
    closing_ = true;
  }
  closing_cv_.notify_all();
  thread_.join();
}

void ControlFileWatcher::run() {
  std::unique_lock lock(mutex_);
  // Polling: a file has no portable change notification that also survives the rename
  // an atomic rewrite does, and a stat every 50 ms costs nothing.
  while (!closing_cv_.wait_for(lock, interval_, [&] { return closing_; })) {
    lock.unlock();
    check();
    lock.lock();
  }
}

void ControlFileWatcher::check() {
  try {
    std::error_code ec;
    const auto size = std::filesystem::file_size(path_, ec);
    if (ec) {
      if (!seen_missing_) {
        seen_missing_ = true;
        seen_.reset();
        on_change_(PeerControl{});
      }
      return;
    }
    const auto mtime = std::filesystem::last_write_time(path_, ec);
    if (ec || (seen_ && seen_->first == size && seen_->second == mtime)) return;
    std::ifstream in(path_, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    seen_ = {size, mtime};
    seen_missing_ = false;
    on_change_(parse_peer_control(text.str()));
  } catch (const std::exception& e) {
    try {
      on_error_(path_.string() + ": " + e.what() + " (the previous settings stay)");
    } catch (...) {
      // Reporting failed; nothing else to do from this thread.
    }
  }
}

}  // namespace hearsay::emulation
