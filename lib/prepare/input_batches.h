// A corpus cut into batches of 256 KiB for prepare's workers (~15 ms of one worker's encoding, so
// the workers finish the last ones nearly together): JSON Lines files at line ends, text files at
// safe cuts (next_safe_cut: no BPE word spans one). Cut points depend on the input
// alone, never on the worker count, so the results put back in order are the same bytes for any
// number of workers. Files are read one after another through InputStream (gzip, zstd or plain).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "prepare/input_stream.h"

namespace spmd {

enum class InputFormat { kText, kJsonLines };

// By name: *.jsonl / *.ndjson (optionally followed by .gz, .zst or .zstd) are JSON Lines.
InputFormat input_format(const std::string& path);

struct InputBatch {
  size_t file_index = 0;
  InputFormat format = InputFormat::kText;
  bool starts_file = false;      // the first batch of its file (a text file is one document)
  int64_t first_line = 1;        // line number of the batch's first byte in its (decompressed) file
  uint64_t offset = 0;           // byte offset of the batch in its (decompressed) file
  uint64_t file_bytes_read = 0;  // BatchReader::file_bytes_read() once this batch was cut
  std::string bytes;
};

class BatchReader {
 public:
  static constexpr size_t kBatchBytes = size_t{1} << 18;

  explicit BatchReader(std::vector<std::string> files);
  ~BatchReader();
  // The next batch, false after the last. Every file gives at least one batch (maybe empty).
  bool next(InputBatch& batch);

  const std::vector<std::string>& files() const { return files_; }
  // Bytes of the files themselves (compressed where they are) read so far, and in all.
  uint64_t file_bytes_read() const;
  uint64_t total_file_bytes() const { return total_file_bytes_; }

 private:
  void open_next_file();
  size_t find_cut();  // end of the next batch in pending_, or 0 when more bytes are needed

  std::vector<std::string> files_;
  uint64_t total_file_bytes_ = 0;
  size_t file_ = 0;  // index of the file stream_ reads
  std::unique_ptr<InputStream> stream_;
  std::string pending_;  // decompressed bytes not yet handed out
  bool stream_done_ = false;
  bool starts_file_ = false;
  int64_t next_line_ = 1;
  uint64_t next_offset_ = 0;
  uint64_t finished_file_bytes_ = 0;
};

}  // namespace spmd
