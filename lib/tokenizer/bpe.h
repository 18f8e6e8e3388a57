// A byte-level BPE vocabulary (GPT-2's algorithm): token ids stand for byte strings; a word from
// the pre-tokenizer (pretokenize.h) starts as its bytes and merges are applied by rank, lowest
// first (leftmost first among equal ranks, as Hugging Face tokenizers does). `<|endoftext|>`
// separates documents; encoding ordinary text never produces it.
#pragma once
#include <cstdint>
#include <memory>
#include <memory_resource>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/pretokenize.h"

namespace spmd {

constexpr const char* kEndOfText = "<|endoftext|>";

struct BpeMerge {
  int32_t left = 0, right = 0, result = 0;  // token ids: left + right -> result
};

struct BpeToken {
  std::string bytes;     // what the token decodes to
  bool special = false;  // not a byte-level token (e.g. <|endoftext|>): never produced by merges
};

class BpeTokenizer {
 public:
  // `tokens` by id; `merges` by rank; eot_id indexes a special token. Every byte needs a
  // one-byte non-special token, and each merge's result must be the concatenation of its parts;
  // violations are UsageErrors prefixed with `origin` (the file that defined them).
  BpeTokenizer(std::vector<BpeToken> tokens, std::vector<BpeMerge> merges, int32_t eot_id,
               const std::string& origin);

  int64_t vocab_size() const { return static_cast<int64_t>(tokens_.size()); }
  int32_t eot_id() const { return eot_id_; }
  const std::vector<BpeToken>& tokens() const { return tokens_; }
  const std::vector<BpeMerge>& merges() const { return merges_; }

  // Appends the ids of one pre-token word (raw bytes).
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  // Pre-tokenizes and encodes `text` (any bytes) without a cache.
  std::vector<int32_t> encode(std::string_view text) const;
  // The bytes of the tokens, concatenated (eot gives "<|endoftext|>"). UsageError on a bad id.
  std::string decode(const std::vector<int64_t>& ids) const;

 private:
  struct Rule {
    int32_t rank, result;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
  }

  std::vector<BpeToken> tokens_;
  std::vector<BpeMerge> merges_;
  std::unordered_map<uint64_t, Rule> rules_;  // (left, right) -> rank and result
  int32_t byte_id_[256] = {};
  int32_t eot_id_ = -1;
};

// Bulk encoding for prepare: pre-tokenizer plus a per-word cache (bounded: cleared when full).
class BpeEncoder {
 public:
  explicit BpeEncoder(const BpeTokenizer& tokenizer);
  void encode(std::string_view text, std::vector<int32_t>& out);

 private:
  static constexpr size_t kMaxCachedWords = size_t{1} << 20;
  struct Ids {
    const int32_t* data;
    size_t size;
  };
  // Nodes, words and ids all come from one arena, so a full cache (or the encoder's end) frees a
  // few large blocks instead of hundreds of thousands of small ones.
  struct WordCache {
    std::pmr::monotonic_buffer_resource arena;
    std::pmr::unordered_map<std::string_view, Ids> ids_of{&arena};
  };
  const Ids& cached(std::string_view word);

  const BpeTokenizer& tokenizer_;
  Pretokenizer pretokenizer_;
  std::vector<std::string_view> words_;
  std::vector<int32_t> word_ids_;
  std::unique_ptr<WordCache> cache_;
};

}  // namespace spmd
