// Exclusive ownership of a file for as long as a process lives: two peers (or a peer and
// `hearsay train`) given the same --metrics file or --checkpoint directory would write
// over each other, so the second one is refused before it writes anything.
//
// The lock is flock(2) on an open descriptor: the kernel releases it when the process
// ends, however it ends (a SIGKILL included), so a crash never leaves a stale lock behind,
// and it works across the hosts of an NFS share (Linux emulates flock with NFS locks).
#pragma once
#include <filesystem>
#include <optional>
#include <string>

namespace hearsay {

class FileLock {
 public:
  // Opens (creating, mode 0644) and locks `file`. When `note` is not empty, the file is
  // truncated and `note` written to it, so that a refused process can say who holds it.
  // nullopt when another process holds the lock; throws std::runtime_error naming the
  // file when it cannot be opened.
  static std::optional<FileLock> try_lock(const std::filesystem::path& file, const std::string& note = {});
  // What the holder wrote with try_lock (empty when unreadable).
  static std::string holder_note(const std::filesystem::path& file);

  FileLock(FileLock&& other) noexcept;
  FileLock& operator=(FileLock&& other) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  // Releases the lock (the file stays). Never throws.
  ~FileLock();

  // The locked descriptor, for a caller that writes the file itself.
  int fd() const { return fd_; }

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace hearsay
