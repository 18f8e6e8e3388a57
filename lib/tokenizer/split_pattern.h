// A pre-tokenizer's split pattern compiled with PCRE2 (UTF + UCP, JIT): GPT-2's, or one read from
// a tokenizer.json (a Split pre-tokenizer's Regex, as Llama 3's). Hugging Face tokenizers matches
// with Oniguruma, where \s is Unicode's White_Space (tab..CR, NEL, the Z category); PCRE2's UCP \s
// also takes U+180E, so \s and \S are spelled out as that set before compiling.
#pragma once
#include <memory>
#include <string>

struct pcre2_real_code_8;

namespace spmd {

class SplitPattern {
 public:
  // GPT-2's pattern (encoder.py's):
  //   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  static std::shared_ptr<const SplitPattern> gpt2();
  // A pattern in tokenizers' syntax. UsageError prefixed with `origin` (file and field) when
  // PCRE2 cannot compile it, or when it could match across the cuts spmd-prepare makes
  // (next_safe_cut in pretokenize.h).
  static std::shared_ptr<const SplitPattern> compile(const std::string& pattern,
                                                     const std::string& origin);

  ~SplitPattern();
  SplitPattern(const SplitPattern&) = delete;
  SplitPattern& operator=(const SplitPattern&) = delete;

  const std::string& source() const { return source_; }  // as written in the file
  bool is_gpt2() const;
  const pcre2_real_code_8* code() const { return code_; }

 private:
  SplitPattern(std::string source, pcre2_real_code_8* code) : source_(std::move(source)), code_(code) {}
  std::string source_;
  pcre2_real_code_8* code_;
};

// `pattern` with \s and \S replaced by explicit White_Space sets (see above). UsageError naming
// `origin` for a \S inside a character class, which no set can spell.
std::string white_space_as_tokenizers(const std::string& pattern, const std::string& origin);

}  // namespace spmd
