// Pre-tokenization: text is split into words by a split pattern (split_pattern.h: GPT-2's by
// default, or a tokenizer.json's such as Llama 3's), each match a word and the text between
// matches too (tokenizers' "Isolated"). BPE merges never cross a word boundary. Bytes that are not
// valid UTF-8 match no alternative; each maximal run of them becomes a word of its own, so any
// byte string splits into words that concatenate back to it.
#pragma once
#include <memory>
#include <string_view>
#include <vector>

#include "tokenizer/split_pattern.h"

namespace spmd {

class Pretokenizer {
 public:
  explicit Pretokenizer(std::shared_ptr<const SplitPattern> pattern = SplitPattern::gpt2());
  ~Pretokenizer();
  Pretokenizer(const Pretokenizer&) = delete;
  Pretokenizer& operator=(const Pretokenizer&) = delete;

  // Appends the words of `text` (views into it, in order, covering it exactly) to `words`.
  void split(std::string_view text, std::vector<std::string_view>& words);

 private:
  struct State;  // per-instance PCRE2 match data and JIT stack (not shared across threads)
  std::shared_ptr<const SplitPattern> pattern_;
  std::unique_ptr<State> state_;
};

// The first position p >= from (or text.size()) where text can be cut without changing its words:
// just after a '\n' that has an ASCII graphic character on each side. No alternative of GPT-2's
// pattern reaches across it ('\n' is a word alone there: a run of whitespace before a non-space
// character gives up its last character, and here the run is that one '\n'), nor of Llama 3's
// (SplitPattern::compile probes a file's pattern). Lets gigabyte inputs be pre-tokenized in chunks.
size_t next_safe_cut(std::string_view text, size_t from);

}  // namespace spmd
