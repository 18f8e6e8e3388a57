// POSIX write + fsync helpers.
#include "util/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "util/error.h"

namespace spmd {

void write_file_durably(const std::string& path, const void* data, size_t size) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw RuntimeError(fmt::format("cannot create {}: {}", path, std::strerror(errno)));
  const char* bytes = static_cast<const char*>(data);
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::write(fd, bytes + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      throw RuntimeError(fmt::format("writing {} failed: {}", path, std::strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    throw RuntimeError(fmt::format("fsync of {} failed: {}", path, std::strerror(err)));
  }
  ::close(fd);
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
