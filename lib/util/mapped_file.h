// A read-only memory map of a whole file (RAII). Token files and prepare's text inputs use it so
// that gigabyte inputs cost page cache, not heap.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace spmd {

class MappedFile {
 public:
  // Maps `path` read-only. Throws UsageError if it cannot be opened or is not a regular file.
  // An empty file maps to size() == 0 and data() == nullptr.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void release();

  std::string path_;
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace spmd
