// The `checkpoints` invariant while a process-engine run goes (invariants.hpp): every
// checkpoint file on disk is, at every look, either whole or absent. A peer replaces its
// checkpoint atomically (model/checkpoint.hpp), so a reader never sees half a file; this
// watch is what would catch a writer that stopped doing so, or a full disk that left a
// truncated file under the checkpoint's name.
//
// The simulator looks at its peers every 20 ms; each look, a checkpoint file whose size or
// modification time changed since the last look is read whole with the model's own reader
// (read_checkpoint: header, shapes, every tensor). What fails to read and is still there
// is a problem, named with the peer and the time. A file that vanished or was replaced
// between the look and the read is read again at the next look.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/model.hpp"

namespace hearsay::sim {

class CheckpointWatch {
 public:
  // Checkpoints of a model of `model` (a zoo name), or with any_model, of a model hearsay
  // does not know (a Python peer's: peer/layout_checkpoint.hpp, read whole by its reader).
  explicit CheckpointWatch(const std::string& model, bool any_model = false);

  // Watches `file` (a checkpoint_path) of peer `id`.
  void add(std::string id, std::filesystem::path file);
  // Reads every watched file that changed since the last look; `elapsed_s` is for messages.
  void look(double elapsed_s);

  // The first problem of each peer, in the order found ("rank3's checkpoint at 12.3 s was
  // not whole: ...").
  const std::vector<std::string>& problems() const noexcept { return problems_; }
  // How many versions of the files were read (whole or not).
  std::uint64_t versions_read() const noexcept { return versions_read_; }

 private:
  struct Watched {
    std::string id;
    std::filesystem::path file;
    std::optional<std::pair<std::uintmax_t, std::filesystem::file_time_type>> seen;  // size, mtime
    bool reported = false;
  };

  std::unique_ptr<Model> model_;  // null with any_model
  std::vector<Watched> watched_;
  std::vector<std::string> problems_;
  std::uint64_t versions_read_ = 0;
};

}  // namespace hearsay::sim
