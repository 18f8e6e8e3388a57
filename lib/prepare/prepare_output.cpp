// Progress lines, temporary-then-renamed outputs, the split (see prepare_output.h).
#include "prepare/prepare_output.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "data/meta.h"
#include "util/error.h"

namespace spmd {

void Progress::start_pass(int pass) {
  pass_ = pass;
  start_ = last_report_ = Clock::now();
}

void Progress::update(uint64_t file_bytes_read, uint64_t text_bytes, int64_t documents,
                      int64_t tokens) {
  const auto now = Clock::now();
  if (!sink_ || now - last_report_ < std::chrono::seconds(2)) return;
  last_report_ = now;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  const double done = total_ > 0 ? std::min(1.0, double(file_bytes_read) / double(total_)) : 1.0;
  const double eta = done > 0 ? seconds * (1 - done) / done : 0;
  sink_(fmt::format("pass {}/{}: {:.0f} / {:.0f} MB of input ({:.1f}%), {:.1f} MB/s of text, {} "
                    "documents, {:.2f}M tokens, ETA {}m{:02d}s",
                    pass_, passes_, file_bytes_read / 1e6, total_ / 1e6, 100 * done,
                    text_bytes / 1e6 / std::max(seconds, 1e-9), documents, tokens / 1e6,
                    static_cast<int>(eta) / 60, static_cast<int>(eta) % 60));
}

OutputFile::OutputFile(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp") {
  file_ = std::fopen(tmp_.c_str(), "wb");
  if (file_ == nullptr)
    throw RuntimeError(fmt::format("{}: cannot create: {}", tmp_, std::strerror(errno)));
}

OutputFile::~OutputFile() {
  if (file_ != nullptr) std::fclose(file_);
  if (!committed_) std::remove(tmp_.c_str());
}

void OutputFile::write(const void* data, size_t bytes) {
  if (bytes > 0 && std::fwrite(data, 1, bytes, file_) != bytes)
    throw RuntimeError(fmt::format("{}: write failed: {}", tmp_, std::strerror(errno)));
}

void OutputFile::rewrite_start(const void* data, size_t bytes) {
  auto seek = [&](int whence) {
    if (std::fseek(file_, 0, whence) != 0)
      throw RuntimeError(fmt::format("{}: seek failed: {}", tmp_, std::strerror(errno)));
  };
  seek(SEEK_SET);
  write(data, bytes);
  seek(SEEK_END);
}

void OutputFile::close() {
  if (file_ == nullptr) return;
  int rc = std::fclose(file_);
  file_ = nullptr;
  if (rc != 0) throw RuntimeError(fmt::format("{}: write failed: {}", tmp_, std::strerror(errno)));
}

void OutputFile::commit() {
  close();
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0)
    throw RuntimeError(fmt::format("{}: cannot rename into place: {}", path_, std::strerror(errno)));
  committed_ = true;
}

int64_t split_train_val(DatasetMeta& meta, int64_t n_tokens, double val_fraction) {
  const auto n_train = static_cast<int64_t>(static_cast<double>(n_tokens) * (1 - val_fraction));
  meta.train_tokens = n_train;
  meta.val_tokens = n_tokens - n_train;
  SPMD_CHECK(meta.train_tokens > 0 && (val_fraction == 0 || meta.val_tokens > 0),
             "input of {} tokens is too small to split with --val-fraction {}", n_tokens, val_fraction);
  return n_train;
}

void write_meta_file(const DatasetMeta& meta, const std::string& out_dir) {
  OutputFile meta_file((std::filesystem::path(out_dir) / "meta.json").string());
  std::string text = meta_to_json(meta).dump(1) + "\n";
  meta_file.write(text.data(), text.size());
  meta_file.commit();
}

}  // namespace spmd
