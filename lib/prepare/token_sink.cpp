// The two output layouts of prepare (see token_sink.h).
#include "prepare/token_sink.h"

#include <cstdio>
#include <filesystem>
#include <limits>
#include <regex>
#include <vector>

#include "util/mapped_file.h"
#include "data/meta.h"
#include "prepare/prepare_output.h"
#include "data/token_file.h"
#include "util/error.h"

namespace spmd {
namespace {

namespace fs = std::filesystem;

void create_out_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw RuntimeError(fmt::format("{}: cannot create directory: {}", dir, ec.message()));
}

// The bytes of `count` ids at `width`: the ids themselves for uint32, narrowed into `narrow` for
// uint16 (the ids fit: the vocabulary chose the width).
const void* as_width(const uint32_t* tokens, size_t count, TokenWidth width, std::vector<uint16_t>& narrow) {
  if (width == TokenWidth::kU32) return tokens;
  narrow.resize(count);
  for (size_t i = 0; i < count; ++i) narrow[i] = static_cast<uint16_t>(tokens[i]);
  return narrow.data();
}

// train.bin + val.bin: everything into train.bin's temporary file, the tail moved out at the end.
class FilePairSink : public TokenSink {
 public:
  explicit FilePairSink(const TokenSinkOptions& options)
      : options_(options),
        bytes_(bytes_per_token(options.width)),
        train_((fs::path(options.out_dir) / "train.bin").string()),
        val_((fs::path(options.out_dir) / "val.bin").string()) {}

  void write(const uint32_t* tokens, size_t count) override {
    train_.write(as_width(tokens, count, options_.width, narrow_), count * bytes_);
    n_tokens_ += static_cast<int64_t>(count);
  }

  void finish(DatasetMeta& meta) override {
    train_.close();
    int64_t n_train = 0;
    if (options_.val_tokens >= 0) {
      n_train = n_tokens_ - options_.val_tokens;
      SPMD_CHECK(n_train > 0, "--val-tokens {} leaves no train tokens: the input has {} tokens",
                 options_.val_tokens, n_tokens_);
      meta.train_tokens = n_train;
      meta.val_tokens = options_.val_tokens;
      meta.val_fraction = static_cast<double>(meta.val_tokens) / static_cast<double>(n_tokens_);
    } else {
      n_train = split_train_val(meta, n_tokens_, options_.val_fraction);
    }
    move_tail(n_train);
    train_.commit();
    val_.commit();
    meta.train_file = "train.bin";
    meta.val_file = "val.bin";
    meta.token_width = options_.width;
  }

 private:
  void move_tail(int64_t n_train) {
    {
      MappedFile map(train_.tmp_path());
      const size_t train_bytes = static_cast<size_t>(n_train) * bytes_;
      val_.write(map.data() + train_bytes, map.size() - train_bytes);
    }
    std::error_code ec;
    fs::resize_file(train_.tmp_path(), static_cast<uintmax_t>(n_train) * bytes_, ec);
    if (ec)
      throw RuntimeError(fmt::format("{}: cannot truncate: {}", train_.tmp_path(), ec.message()));
  }

  TokenSinkOptions options_;
  size_t bytes_;
  OutputFile train_, val_;
  std::vector<uint16_t> narrow_;
  int64_t n_tokens_ = 0;
};

// llm.c shards, val first.
class ShardSink : public TokenSink {
 public:
  explicit ShardSink(const TokenSinkOptions& options)
      : options_(options),
        val_target_(options.val_tokens >= 0 ? options.val_tokens : options.shard_tokens) {}

  ~ShardSink() override {
    current_.reset();  // its temporary file goes
    if (!finished_)
      for (const auto& path : committed_) std::remove(path.c_str());
  }

  void write(const uint32_t* tokens, size_t count) override {
    while (count > 0) {
      if (!current_) open_shard();
      const int64_t room = std::min(options_.shard_tokens - in_shard_, split_left());
      const size_t n = std::min(count, static_cast<size_t>(room));
      current_->write(as_width(tokens, n, options_.width, narrow_), n * bytes_per_token(options_.width));
      in_shard_ += static_cast<int64_t>(n);
      (in_val_ ? val_written_ : train_written_) += static_cast<int64_t>(n);
      tokens += n;
      count -= n;
      if (in_shard_ == options_.shard_tokens || (in_val_ && val_written_ == val_target_))
        close_shard();
    }
  }

  void finish(DatasetMeta& meta) override {
    if (current_) close_shard();
    SPMD_CHECK(val_written_ == val_target_ && train_written_ > 0,
               "the input has {} tokens: too few for {} val tokens and a train shard",
               val_written_ + train_written_, val_target_);
    remove_stale_shards();
    meta.train_tokens = train_written_;
    meta.val_tokens = val_written_;
    meta.val_fraction =
        static_cast<double>(val_written_) / static_cast<double>(val_written_ + train_written_);
    meta.train_file = "train_*.bin";
    meta.val_file = val_target_ > 0 ? "val_*.bin" : "";
    meta.shard_tokens = options_.shard_tokens;
    meta.token_width = options_.width;
    finished_ = true;
  }

 private:
  // Tokens the current part (val, or train: unbounded) still takes.
  int64_t split_left() const {
    return in_val_ ? val_target_ - val_written_ : std::numeric_limits<int64_t>::max();
  }

  void open_shard() {
    in_val_ = val_written_ < val_target_;
    int& index = in_val_ ? val_shards_ : train_shards_;
    const std::string name = fmt::format("{}_{:06d}.bin", in_val_ ? "val" : "train", index++);
    current_ = std::make_unique<OutputFile>((fs::path(options_.out_dir) / name).string());
    current_path_ = (fs::path(options_.out_dir) / name).string();
    const int32_t header[256] = {};
    current_->write(header, sizeof(header));  // the real header once the count is known
    in_shard_ = 0;
  }

  void close_shard() {
    int32_t header[256] = {llmc_magic(options_.width), llmc_version(options_.width), static_cast<int32_t>(in_shard_)};
    current_->rewrite_start(header, sizeof(header));
    current_->commit();
    committed_.push_back(current_path_);
    current_.reset();
  }

  // Shards of an earlier run into the same directory that this run did not overwrite.
  void remove_stale_shards() {
    const std::regex shard_name(R"((train|val)_(\d{6})\.bin)");
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(options_.out_dir, ec)) {
      std::smatch m;
      const std::string name = entry.path().filename().string();
      if (!std::regex_match(name, m, shard_name)) continue;
      const int count = m[1] == "val" ? val_shards_ : train_shards_;
      if (std::stoi(m[2]) >= count) fs::remove(entry.path(), ec);
    }
  }

  TokenSinkOptions options_;
  int64_t val_target_;
  std::unique_ptr<OutputFile> current_;
  std::vector<uint16_t> narrow_;
  std::string current_path_;
  std::vector<std::string> committed_;
  bool in_val_ = false, finished_ = false;
  int64_t in_shard_ = 0, val_written_ = 0, train_written_ = 0;
  int val_shards_ = 0, train_shards_ = 0;
};

}  // namespace

std::unique_ptr<TokenSink> make_token_sink(const TokenSinkOptions& options) {
  create_out_dir(options.out_dir);
  if (options.shard_tokens > 0) {
    SPMD_CHECK(options.shard_tokens <= std::numeric_limits<int32_t>::max(),
               "--shard-tokens {} is more than an llm.c header counts (2^31 - 1)",
               options.shard_tokens);
    return std::make_unique<ShardSink>(options);
  }
  return std::make_unique<FilePairSink>(options);
}

}  // namespace spmd
