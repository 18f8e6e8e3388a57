// Token files on disk: nanoGPT's flat little-endian uint16 layout and llm.c's shards (a 256 x int32
// header: magic 20240520, version 1, token count; then uint16 tokens), memory-mapped and validated.
// A TokenDataset is one file, a directory of *.bin shards or a glob of shards, in sorted order.
// Format detection: a file whose first int32 is 20240520 is llm.c; a file whose first 1 KiB has
// the shape of an llm.c header (three nonzero words, then 253 zero words) but another magic is a
// corrupt shard; anything else is nanoGPT.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "util/mapped_file.h"

namespace spmd {

enum class TokenFormat { kNanoGpt, kLlmC };

constexpr int32_t kLlmCMagic = 20240520;
constexpr int32_t kLlmCVersion = 1;
constexpr size_t kLlmCHeaderBytes = 256 * sizeof(int32_t);

// One validated token file. Every problem (truncation, bad header, token id >= vocab_size) is a
// UsageError whose message starts with the file name.
class TokenFile {
 public:
  // vocab_size bounds the token ids (ids >= vocab_size are refused); values above 65535 accept all.
  static TokenFile open(const std::string& path, int64_t vocab_size);

  const std::string& path() const { return map_.path(); }
  TokenFormat format() const { return format_; }
  const uint16_t* tokens() const { return tokens_; }
  int64_t num_tokens() const { return num_tokens_; }

 private:
  explicit TokenFile(MappedFile map) : map_(std::move(map)) {}

  MappedFile map_;
  TokenFormat format_ = TokenFormat::kNanoGpt;
  const uint16_t* tokens_ = nullptr;
  int64_t num_tokens_ = 0;
};

// The files named by `spec`: a file, a directory (its *.bin files) or a glob pattern; sorted.
// Throws UsageError when nothing matches.
std::vector<std::string> resolve_token_paths(const std::string& spec);

// A dataset = the token files of one spec, in order. Immutable once opened; shared by loaders.
class TokenDataset {
 public:
  static std::shared_ptr<const TokenDataset> open(const std::string& spec, int64_t vocab_size);

  const std::string& spec() const { return spec_; }
  const std::vector<TokenFile>& files() const { return files_; }
  int64_t vocab_size() const { return vocab_size_; }
  int64_t num_tokens() const { return num_tokens_; }

 private:
  TokenDataset() = default;

  std::string spec_;
  std::vector<TokenFile> files_;
  int64_t vocab_size_ = 0;
  int64_t num_tokens_ = 0;
};

}  // namespace spmd
