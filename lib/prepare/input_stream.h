// One input file's bytes, decompressed on the fly: gzip (also concatenated members) and zstd are
// recognised by their magic bytes, whatever the file is named; anything else is read as it is.
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

namespace spmd {

enum class Compression { kNone, kGzip, kZstd };

class InputStream {
 public:
  explicit InputStream(const std::string& path);  // UsageError when it cannot be opened
  ~InputStream();
  InputStream(const InputStream&) = delete;
  InputStream& operator=(const InputStream&) = delete;

  // Appends up to `max_bytes` decompressed bytes to `out`; returns how many (0 only at the end).
  // Corrupt or truncated compressed data is a UsageError naming the file.
  size_t read(std::string& out, size_t max_bytes);

  Compression compression() const { return compression_; }
  // Bytes of the file itself consumed so far (compressed bytes for .gz/.zst): progress and ETA.
  uint64_t file_bytes_read() const { return file_bytes_read_; }
  const std::string& path() const { return path_; }

 private:
  struct Decoder;  // zlib's or libzstd's streaming state
  bool refill();   // reads the next block of the file into in_; false at its end
  size_t decode(char* dst, size_t cap);

  std::string path_;
  std::FILE* file_ = nullptr;
  Compression compression_ = Compression::kNone;
  std::unique_ptr<Decoder> decoder_;
  std::string in_;  // raw bytes read from the file, not yet decoded
  size_t in_pos_ = 0;
  bool file_done_ = false;
  uint64_t file_bytes_read_ = 0;
};

}  // namespace spmd
