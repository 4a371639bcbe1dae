// Writing a file so that a crash or an error at any moment leaves either the previous
// file or the complete new one, never a part: the bytes go to a temporary file next to
// the target, which is synced to disk and then renamed over the target (or hard-linked
// to it, which fails atomically when the target exists), and finally the directory entry
// is synced. Checkpoints, CURVE key files and `hearsay topology --dot` all write this way.
#pragma once
#include <sys/types.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

namespace hearsay {

class AtomicFileError : public std::runtime_error {
 public:
  AtomicFileError(const std::string& message, int error, bool in_place)
      : std::runtime_error(message), error_(error), in_place_(in_place) {}
  int error() const noexcept { return error_; }  // the errno of the failed call
  // True only when the new file is in place and just its directory could not be synced.
  bool in_place() const noexcept { return in_place_; }

 private:
  int error_;
  bool in_place_;
};

class AtomicFileWriter {
 public:
  enum class Replace { yes, no };

  // Creates the temporary file (".<name>.tmp-XXXXXX" next to target) with exactly `mode`.
  // Throws AtomicFileError.
  explicit AtomicFileWriter(std::filesystem::path target, mode_t mode = 0644);
  // Removes the temporary file unless commit() put it in place. Never throws.
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  // Appends bytes. Throws AtomicFileError (disk full, file too large, I/O error).
  void write(const void* data, std::size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // Syncs and closes the temporary file, puts it in place (Replace::no: fails with
  // error() == EEXIST when the target exists) and syncs the directory. Call once.
  void commit(Replace replace = Replace::yes);

 private:
  std::filesystem::path target_, dir_;
  std::string temporary_;  // empty once it is gone (renamed or removed)
  int fd_ = -1;
};

// The whole of `content` as one file, through AtomicFileWriter.
void write_file_atomically(const std::filesystem::path& target, std::string_view content, mode_t mode = 0644,
                           AtomicFileWriter::Replace replace = AtomicFileWriter::Replace::yes);

}  // namespace hearsay
