// A byte-level BPE vocabulary (GPT-2's algorithm): token ids stand for byte strings; a word from
// the pre-tokenizer (pretokenize.h) starts as its bytes and merges are applied by rank, lowest
// first (leftmost first among equal ranks, as Hugging Face tokenizers does). One special token
// separates documents (`<|endoftext|>`, or a tokenizer.json's start-of-text token such as Llama 3's
// `<|begin_of_text|>`). A tokenizer.json also brings its text rules (BpeTextRules): its split
// pattern, its added tokens, which the input's text names literally (as in tokenizers), and
// ignore_merges. Without them (GPT-2's files) ordinary text never encodes to a special token.
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

// What a tokenizer.json changes in how text is encoded; the defaults are GPT-2's.
struct BpeTextRules {
  std::shared_ptr<const SplitPattern> pattern = SplitPattern::gpt2();
  std::vector<int32_t> added_in_text;  // tokens found in the text by their bytes before splitting
  bool ignore_merges = false;          // a word that is a token is that token, merges unused
  bool eot_starts_documents = false;   // eot is a start-of-text token: before the first document too
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
               const std::string& origin, BpeTextRules rules = {});

  int64_t vocab_size() const { return static_cast<int64_t>(tokens_.size()); }
  int32_t eot_id() const { return eot_id_; }
  const std::vector<BpeToken>& tokens() const { return tokens_; }
  const std::vector<BpeMerge>& merges() const { return merges_; }
  const BpeTextRules& rules() const { return text_rules_; }
  // Whether vocab.json + merges.txt say everything about it (GPT-2's rules).
  bool gpt2_rules() const;

  // Appends the ids of one pre-token word (raw bytes).
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  // Pre-tokenizes and encodes `text` (any bytes) without a cache.
  std::vector<int32_t> encode(std::string_view text) const;
  // The bytes of the tokens, concatenated (eot gives "<|endoftext|>"). UsageError on a bad id.
  std::string decode(const std::vector<int64_t>& ids) const;

  // Calls on_text(piece) for the text between added tokens and on_added(id) for each added token
  // found, in order (the leftmost match first, the longest among those, as tokenizers does).
  template <class OnText, class OnAdded>
  void split_added(std::string_view text, OnText on_text, OnAdded on_added) const {
    size_t pos = 0;
    for (AddedMatch m; (m = next_added(text, pos)).id >= 0; pos = m.begin + m.size) {
      if (m.begin > pos) on_text(text.substr(pos, m.begin - pos));
      on_added(m.id);
    }
    if (pos < text.size()) on_text(text.substr(pos));
  }

 private:
  struct Rule {
    int32_t rank, result;
  };
  struct AddedMatch {
    size_t begin = 0, size = 0;
    int32_t id = -1;
  };
  AddedMatch next_added(std::string_view text, size_t from) const;
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
  }

  std::vector<BpeToken> tokens_;
  std::vector<BpeMerge> merges_;
  std::unordered_map<uint64_t, Rule> rules_;  // (left, right) -> rank and result
  int32_t byte_id_[256] = {};
  int32_t eot_id_ = -1;
  BpeTextRules text_rules_;
  std::vector<int32_t> added_longest_first_;        // text_rules_.added_in_text, longest bytes first
  bool added_first_byte_[256] = {};                 // bytes an added token starts with
  std::unordered_map<std::string, int32_t> word_id_;  // bytes -> id, with ignore_merges only
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
