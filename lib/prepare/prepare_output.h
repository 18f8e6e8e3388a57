// Pieces shared by the prepare pipelines: progress lines, outputs written under a temporary name,
// the train/val split by fraction, meta.json.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace spmd {

// Progress lines, about one every two seconds: the pass, the input files' bytes read (compressed
// bytes where they are) of their total, MB/s of text, documents, tokens and the pass's ETA.
class Progress {
 public:
  Progress(const std::function<void(const std::string&)>& sink, uint64_t total_file_bytes, int passes)
      : sink_(sink), total_(total_file_bytes), passes_(passes) {}
  void start_pass(int pass);
  // After each batch: the pass's running totals.
  void update(uint64_t file_bytes_read, uint64_t text_bytes, int64_t documents, int64_t tokens);

 private:
  using Clock = std::chrono::steady_clock;
  const std::function<void(const std::string&)>& sink_;
  uint64_t total_;
  int passes_;
  int pass_ = 1;
  Clock::time_point start_ = Clock::now(), last_report_ = Clock::now();
};

// An output written under "<path>.tmp" and renamed into place by commit(); removed if abandoned.
class OutputFile {
 public:
  explicit OutputFile(std::string path);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  void write(const void* data, size_t bytes);
  // Overwrites the first bytes (a header whose contents are known only at the end).
  void rewrite_start(const void* data, size_t bytes);
  // Closes the temporary file (it can then be read and resized under tmp_path()); commit() after.
  void close();
  void commit();
  const std::string& tmp_path() const { return tmp_; }

 private:
  std::string path_, tmp_;
  std::FILE* file_ = nullptr;
  bool committed_ = false;
};

struct DatasetMeta;

// Like nanoGPT: train = data[:int(n * (1 - f))], val = the rest. Sets meta's token counts and
// returns the train count; UsageError when either part would be empty (val only if f > 0).
int64_t split_train_val(DatasetMeta& meta, int64_t n_tokens, double val_fraction);

// meta.json, written last so that a complete meta.json means complete outputs.
void write_meta_file(const DatasetMeta& meta, const std::string& out_dir);

}  // namespace spmd
