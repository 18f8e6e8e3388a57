// Writing files that survive a crash: write, fsync, and fsync the directory after a rename.
#pragma once
#include <cstddef>
#include <string>

namespace spmd {

// A file written in pieces and made durable at the end: create, append..., finish (fsync).
// RuntimeError naming the path on any failure; a file never finished is closed, not removed.
class DurableFile {
 public:
  explicit DurableFile(const std::string& path);  // creates or truncates
  ~DurableFile();
  DurableFile(const DurableFile&) = delete;
  DurableFile& operator=(const DurableFile&) = delete;
  void append(const void* data, size_t size);
  void finish();  // fsync and close
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

// write(2) of all `size` bytes to `fd` (retried after EINTR); RuntimeError naming `path` on failure
// (a full disk included).
void write_all(int fd, const void* data, size_t size, const std::string& path);
// Creates/overwrites `path` with the bytes, then fsyncs it. RuntimeError naming the path on failure.
void write_file_durably(const std::string& path, const void* data, size_t size);
void write_file_durably(const std::string& path, const std::string& contents);
// fsync a directory so that renames and creations inside it are durable.
void fsync_directory(const std::string& path);

}  // namespace spmd
