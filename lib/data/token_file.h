// Token files on disk, memory-mapped and validated: nanoGPT's flat little-endian layout (uint16, or
// uint32 when the meta.json beside the file says "dtype": "uint32") and llm.c's shards (a 256 x
// int32 header: magic, version, token count; then the tokens: magic 20240520 version 1 for uint16
// tokens, GPT-2's; magic 20240801 version 7 for uint32 tokens, Llama 3's).
// A TokenDataset is one file, a directory of *.bin shards or a glob of shards, in sorted order;
// its files may differ in width (windows never cross a file).
// Format detection: a file whose first int32 is one of llm.c's magics is llm.c; a file whose first
// 1 KiB has the shape of an llm.c header (three nonzero words, then 253 zero words) but another
// magic is a corrupt shard; anything else is nanoGPT.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/token_width.h"
#include "util/mapped_file.h"

namespace spmd {

enum class TokenFormat { kNanoGpt, kLlmC };

// llm.c's shard headers (its dev/data/data_common.py): GPT-2's uint16 tokens and Llama 3's uint32.
constexpr int32_t kLlmCMagic = 20240520;
constexpr int32_t kLlmCVersion = 1;
constexpr int32_t kLlmCLlama3Magic = 20240801;
constexpr int32_t kLlmCLlama3Version = 7;
constexpr size_t kLlmCHeaderBytes = 256 * sizeof(int32_t);

// The magic and version of an llm.c shard whose tokens are `width` wide.
inline int32_t llmc_magic(TokenWidth width) { return width == TokenWidth::kU32 ? kLlmCLlama3Magic : kLlmCMagic; }
inline int32_t llmc_version(TokenWidth width) { return width == TokenWidth::kU32 ? kLlmCLlama3Version : kLlmCVersion; }

// A vocab_size that bounds nothing: every id of either width is accepted.
constexpr int64_t kAnyTokenId = INT64_MAX;

// One validated token file. Every problem (truncation, bad header, token id >= vocab_size) is a
// UsageError whose message starts with the file name.
class TokenFile {
 public:
  // vocab_size bounds the token ids (ids >= vocab_size are refused; kAnyTokenId accepts all).
  // flat_width: the width of a nanoGPT file's ids (an llm.c shard's header says its own).
  static TokenFile open(const std::string& path, int64_t vocab_size, TokenWidth flat_width = TokenWidth::kU16);

  const std::string& path() const { return map_.path(); }
  TokenFormat format() const { return format_; }
  TokenWidth width() const { return width_; }
  int64_t num_tokens() const { return num_tokens_; }
  // Calls fn with the ids as `const uint16_t*` or `const uint32_t*`: one branch on the width, then
  // loops typed for it (no per-token test on the hot path).
  template <class Fn>
  decltype(auto) visit(Fn&& fn) const {
    if (width_ == TokenWidth::kU32) return fn(static_cast<const uint32_t*>(tokens_));
    return fn(static_cast<const uint16_t*>(tokens_));
  }
  // Id i (i < num_tokens()), whatever the width: for messages and checks, not for loops.
  int64_t token(int64_t i) const {
    return visit([i](const auto* t) { return static_cast<int64_t>(t[i]); });
  }

 private:
  explicit TokenFile(MappedFile map) : map_(std::move(map)) {}

  MappedFile map_;
  TokenFormat format_ = TokenFormat::kNanoGpt;
  TokenWidth width_ = TokenWidth::kU16;
  const void* tokens_ = nullptr;
  int64_t num_tokens_ = 0;
};

// The files named by `spec`: a file, a directory (its *.bin files) or a glob pattern; sorted.
// Throws UsageError when nothing matches.
std::vector<std::string> resolve_token_paths(const std::string& spec);

// A dataset = the token files of one spec, in order. Immutable once opened; shared by loaders.
class TokenDataset {
 public:
  // A nanoGPT file's width is the "dtype" of the meta.json beside it (uint16 without one, as
  // nanoGPT writes); an llm.c shard's is its header's, and must agree with such a meta.json.
  static std::shared_ptr<const TokenDataset> open(const std::string& spec, int64_t vocab_size);

  const std::string& spec() const { return spec_; }
  const std::vector<TokenFile>& files() const { return files_; }
  // Fine-tuning data (spmd-prepare --format): NAME.targets.bin beside each NAME.bin, one byte per
  // token (1 = the token is a target), and the window its examples were packed into (meta.json's
  // fine_tuning.block_size). nullptr and 0 for pretraining data, where every token is a target.
  const unsigned char* targets(size_t file) const { return target_maps_.empty() ? nullptr : target_maps_[file].data(); }
  bool has_targets() const { return packed_block_ > 0; }
  int64_t packed_block_size() const { return packed_block_; }
  int64_t vocab_size() const { return vocab_size_; }
  int64_t num_tokens() const { return num_tokens_; }

 private:
  TokenDataset() = default;

  std::string spec_;
  std::vector<TokenFile> files_;
  std::vector<MappedFile> target_maps_;  // one per file, or none
  int64_t packed_block_ = 0;
  int64_t vocab_size_ = 0;
  int64_t num_tokens_ = 0;
};

}  // namespace spmd
