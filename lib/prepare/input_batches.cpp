// Cutting the corpus into batches (see input_batches.h).
#include "prepare/input_batches.h"

#include <algorithm>
#include <filesystem>

#include "tokenizer/pretokenize.h"

namespace spmd {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

InputFormat input_format(const std::string& path) {
  std::string name = std::filesystem::path(path).filename().string();
  for (const char* compressed : {".gz", ".zst", ".zstd"})
    if (ends_with(name, compressed)) name.resize(name.size() - std::string(compressed).size());
  return ends_with(name, ".jsonl") || ends_with(name, ".ndjson") ? InputFormat::kJsonLines
                                                                 : InputFormat::kText;
}

BatchReader::BatchReader(std::vector<std::string> files) : files_(std::move(files)) {
  for (const auto& f : files_) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(f, ec);
    if (!ec) total_file_bytes_ += size;
  }
}

BatchReader::~BatchReader() = default;

uint64_t BatchReader::file_bytes_read() const {
  return finished_file_bytes_ + (stream_ ? stream_->file_bytes_read() : 0);
}

void BatchReader::open_next_file() {
  stream_ = std::make_unique<InputStream>(files_[file_]);
  pending_.clear();
  stream_done_ = false;
  starts_file_ = true;
  next_line_ = 1;
  next_offset_ = 0;
}

size_t BatchReader::find_cut() {
  if (stream_done_) return pending_.size();
  if (pending_.size() <= kBatchBytes) return 0;
  if (input_format(files_[file_]) == InputFormat::kJsonLines) {
    const size_t newline = pending_.find('\n', kBatchBytes - 1);
    return newline == std::string::npos ? 0 : newline + 1;
  }
  const size_t cut = next_safe_cut(pending_, kBatchBytes);
  return cut < pending_.size() ? cut : 0;  // the end of what was read is no proven cut
}

bool BatchReader::next(InputBatch& batch) {
  for (;;) {
    if (file_ >= files_.size()) return false;
    if (!stream_) open_next_file();
    size_t cut = find_cut();
    while (cut == 0 && !stream_done_) {
      if (stream_->read(pending_, kBatchBytes) == 0) stream_done_ = true;
      cut = find_cut();
    }
    // Now cut > 0, or the file is used up (an empty file still gives one empty batch).
    if (cut > 0 || starts_file_) {
      batch.file_index = file_;
      batch.format = input_format(files_[file_]);
      batch.starts_file = starts_file_;
      batch.first_line = next_line_;
      batch.offset = next_offset_;
      batch.bytes.assign(pending_, 0, cut);
      pending_.erase(0, cut);
      starts_file_ = false;
      next_offset_ += cut;
      next_line_ += std::count(batch.bytes.begin(), batch.bytes.end(), '\n');
      batch.file_bytes_read = file_bytes_read();
      return true;
    }
    finished_file_bytes_ += stream_->file_bytes_read();
    stream_.reset();
    ++file_;
  }
}

}  // namespace spmd
