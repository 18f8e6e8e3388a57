// POSIX write + fsync helpers.
#include "util/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "util/error.h"

namespace spmd {

DurableFile::DurableFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw RuntimeError(fmt::format("cannot create {}: {}", path, std::strerror(errno)));
}

DurableFile::~DurableFile() {
  if (fd_ >= 0) ::close(fd_);
}

void write_all(int fd, const void* data, size_t size, const std::string& path) {
  const char* bytes = static_cast<const char*>(data);
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::write(fd, bytes + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw RuntimeError(fmt::format("writing {} failed: {}", path, std::strerror(n < 0 ? errno : ENOSPC)));
    done += static_cast<size_t>(n);
  }
}

void DurableFile::append(const void* data, size_t size) { write_all(fd_, data, size, path_); }

void DurableFile::finish() {
  if (::fsync(fd_) != 0) throw RuntimeError(fmt::format("fsync of {} failed: {}", path_, std::strerror(errno)));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) throw RuntimeError(fmt::format("closing {} failed: {}", path_, std::strerror(errno)));
}

void write_file_durably(const std::string& path, const void* data, size_t size) {
  DurableFile file(path);
  file.append(data, size);
  file.finish();
}

void write_file_durably(const std::string& path, const std::string& contents) {
  write_file_durably(path, contents.data(), contents.size());
}

void fsync_directory(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw RuntimeError(fmt::format("cannot open directory {}: {}", path, std::strerror(errno)));
  ::fsync(fd);
  ::close(fd);
}

}  // namespace spmd
