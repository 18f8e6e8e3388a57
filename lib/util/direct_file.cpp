// O_DIRECT writes through an aligned bounce buffer (see direct_file.h).
#include "util/direct_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "util/durable_file.h"
#include "util/error.h"

namespace spmd {

namespace {
constexpr size_t kBlock = 4096;            // O_DIRECT's alignment of memory, offsets and lengths
constexpr size_t kBufferBytes = 8 << 20;  // a multiple of kBlock

int open_for_writing(const std::string& path, bool direct) {
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | (direct ? O_DIRECT : 0), 0644);
}
}  // namespace

DirectFile::DirectFile(const std::string& path) : path_(path) {
  fd_ = open_for_writing(path, true);
  direct_ = fd_ >= 0;
  if (!direct_ && errno == EINVAL) fd_ = open_for_writing(path, false);
  if (fd_ < 0) throw RuntimeError(fmt::format("cannot create {}: {}", path, std::strerror(errno)));
  buffer_ = static_cast<unsigned char*>(std::aligned_alloc(kBlock, kBufferBytes));
  if (buffer_ == nullptr) throw RuntimeError(fmt::format("{}: no memory for a {} MiB write buffer", path, kBufferBytes >> 20));
}

DirectFile::~DirectFile() {
  if (fd_ >= 0) ::close(fd_);
  std::free(buffer_);
}

void DirectFile::write_blocks(size_t bytes) {
  write_all(fd_, buffer_, bytes, path_);
  written_ += bytes;
  used_ -= std::min(used_, bytes);
}

void DirectFile::append(const void* data, size_t size) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  while (size > 0) {
    const size_t n = std::min(size, kBufferBytes - used_);
    std::memcpy(buffer_ + used_, bytes, n);
    used_ += n, bytes += n, size -= n;
    if (used_ == kBufferBytes) write_blocks(kBufferBytes);
  }
  // Every whole block in the file now; the partial one moves to the front for the next append.
  const size_t whole = used_ / kBlock * kBlock, tail = used_ - whole;
  if (whole == 0) return;
  write_blocks(whole);
  std::memmove(buffer_, buffer_ + whole, tail);
  used_ = tail;
}

void DirectFile::finish() {
  if (used_ > 0) {
    const uint64_t size = written_ + used_;
    const size_t padded = direct_ ? (used_ + kBlock - 1) / kBlock * kBlock : used_;
    std::memset(buffer_ + used_, 0, padded - used_);
    write_blocks(padded);
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0)
      throw RuntimeError(fmt::format("truncating {} failed: {}", path_, std::strerror(errno)));
  }
  if (::fsync(fd_) != 0) throw RuntimeError(fmt::format("fsync of {} failed: {}", path_, std::strerror(errno)));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) throw RuntimeError(fmt::format("closing {} failed: {}", path_, std::strerror(errno)));
}

}  // namespace spmd
