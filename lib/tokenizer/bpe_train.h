// Learning byte-level BPE merges from text (GPT-2's algorithm): count the pre-tokenizer's words,
// then repeatedly merge the most frequent adjacent pair of tokens inside words. Ties go to the
// lexicographically smallest pair of byte strings (compare the left tokens' bytes, then the
// right's, as unsigned bytes), so training is a pure function of the input text.
// Ids: 0..255 are the single bytes in byte order, then one id per merge, then <|endoftext|> last.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/pretokenize.h"

namespace spmd {

class BpeTrainer {
 public:
  // Counts the words of `text` (one call per chunk; chunks should end at a word boundary).
  void add_text(std::string_view text);
  // Learns up to `num_merges` merges; fewer when no adjacent pair is left in any word.
  // `progress` (may be null) gets a line every 1000 merges.
  BpeTokenizer train(int64_t num_merges,
                     const std::function<void(const std::string&)>& progress = nullptr) const;

 private:
  Pretokenizer pretokenizer_;
  std::vector<std::string_view> words_;
  std::unordered_map<std::string, int64_t> counts_;
};

}  // namespace spmd
