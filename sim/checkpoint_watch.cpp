#include "sim/checkpoint_watch.hpp"

#include <cstdio>
#include <exception>

#include "model/checkpoint.hpp"
#include "model/zoo.hpp"
#include "peer/layout_checkpoint.hpp"

namespace hearsay::sim {

CheckpointWatch::CheckpointWatch(const std::string& model, bool any_model)
    : model_(any_model ? nullptr : make_model(model)) {}

void CheckpointWatch::add(std::string id, std::filesystem::path file) {
  watched_.push_back(Watched{std::move(id), std::move(file), std::nullopt, false});
}

void CheckpointWatch::look(double elapsed_s) {
  for (Watched& w : watched_) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(w.file, ec);
    if (ec) continue;  // absent (not written yet, or being replaced): allowed
    const auto mtime = std::filesystem::last_write_time(w.file, ec);
    if (ec) continue;
    const std::pair<std::uintmax_t, std::filesystem::file_time_type> now{size, mtime};
    if (w.seen == now) continue;
    w.seen = now;
    ++versions_read_;
    try {
      if (model_)
        read_checkpoint(w.file, *model_);
      else
        read_layout_checkpoint_state(w.file);
    } catch (const std::exception& e) {
      // Gone since (absent), or replaced while it was read (its optimizer file, named by
      // step, may have gone with the old version): the next look reads what is there now.
      const auto size_after = std::filesystem::file_size(w.file, ec);
      if (ec || size_after != size || std::filesystem::last_write_time(w.file, ec) != mtime || ec) {
        w.seen.reset();
        continue;
      }
      if (w.reported) continue;
      w.reported = true;
      char at[32];
      std::snprintf(at, sizeof at, "%.1f", elapsed_s);
      problems_.push_back(w.id + "'s checkpoint at " + at + " s was not whole: " + e.what());
    }
  }
}

}  // namespace hearsay::sim
