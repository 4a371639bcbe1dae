#include "base/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace hearsay {

namespace fs = std::filesystem;

namespace {

std::string in_quotes(const std::string& p) { return "'" + p + "'"; }

[[noreturn]] void fail(const std::string& what, int error, bool in_place = false) {
  throw AtomicFileError(what + ": " + std::strerror(error), error, in_place);
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(fs::path target, mode_t mode)
    : target_(std::move(target)), dir_(target_.has_parent_path() ? target_.parent_path() : fs::path(".")) {
  temporary_ = (dir_ / ("." + target_.filename().string() + ".tmp-XXXXXX")).string();
  fd_ = ::mkstemp(temporary_.data());
  if (fd_ < 0) {
    const int error = errno;
    temporary_.clear();
    fail("cannot create a file in " + in_quotes(dir_.string()) +
             " (check that the directory exists and is writable)",
         error);
  }
  // mkstemp creates 0600; the mode is set before any byte is written, so a secret is
  // never readable by others, and it does not depend on the umask.
  if (::fchmod(fd_, mode) != 0) fail("cannot set the mode of " + in_quotes(temporary_), errno);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!temporary_.empty()) ::unlink(temporary_.c_str());
}

void AtomicFileWriter::write(const void* data, std::size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("writing " + in_quotes(temporary_) + " failed", errno);
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

void AtomicFileWriter::commit(Replace replace) {
  if (::fsync(fd_) != 0) fail("syncing " + in_quotes(temporary_) + " failed", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0)
    fail("closing " + in_quotes(temporary_) + " failed", errno);  // a deferred write error
  if (replace == Replace::yes) {
    if (::rename(temporary_.c_str(), target_.c_str()) != 0)
      fail("renaming " + in_quotes(temporary_) + " to " + in_quotes(target_.string()) + " failed", errno);
    temporary_.clear();  // the temporary name is gone
  } else {
    if (::link(temporary_.c_str(), target_.c_str()) != 0) {
      const int error = errno;
      if (error == EEXIST)
        throw AtomicFileError(in_quotes(target_.string()) + " already exists", error, false);
      fail("cannot create " + in_quotes(target_.string()), error);
    }
    // The target is in place; the destructor removes the temporary name.
  }
  // The new name is durable only once the directory entry is on disk. Some filesystems
  // cannot fsync a directory (EINVAL); the file itself is complete either way.
  const int dir_fd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  const int error = dir_fd < 0 ? errno : (::fsync(dir_fd) != 0 ? errno : 0);
  if (dir_fd >= 0) ::close(dir_fd);
  if (error != 0 && error != EINVAL)
    fail(in_quotes(target_.string()) + " was written, but syncing its directory " + in_quotes(dir_.string()) +
             " failed (it may not survive a power loss)",
         error, true);
}

void write_file_atomically(const fs::path& target, std::string_view content, mode_t mode,
                           AtomicFileWriter::Replace replace) {
  AtomicFileWriter file(target, mode);
  file.write(content);
  file.commit(replace);
}

}  // namespace hearsay
